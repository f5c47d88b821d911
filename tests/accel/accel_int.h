/* SPDX-License-Identifier: Apache-2.0 */
/* kl_accel's parts (accel.h describes the provider): the device (a thread
 * with slots, accel_dev.c) and the provider's algorithms (accel_prov.c). */
#ifndef KL_TESTS_ACCEL_INT_H
#define KL_TESTS_ACCEL_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "accel.h"

#define ACC_MAX_SIG 1024 /* RSA up to 8192 bits */
#define ACC_MAX_TBS 128
#define ACC_NAME_MAX 32

/* A key held by the provider: the same key in the default provider (the
 * "device" signs with it) and a serial number that names it in memo. */
typedef struct acc_key {
    EVP_PKEY *soft;
    int type; /* EVP_PKEY_EC or EVP_PKEY_RSA */
    uint64_t serial;
} acc_key;

/* What to sign and how: everything the device needs, copied. */
typedef struct acc_req {
    EVP_PKEY *soft; /* referenced */
    uint64_t serial;
    char md[ACC_NAME_MAX];   /* "" : none */
    char mgf1[ACC_NAME_MAX]; /* "" : the signing hash */
    int pad;                 /* RSA_PKCS1_PADDING or RSA_PKCS1_PSS_PADDING */
    int saltlen;
    uint8_t tbs[ACC_MAX_TBS];
    size_t tbslen;
} acc_req;

/* Signs req in software (default provider) into sig (cap bytes); returns
 * the length, 0 on failure. */
size_t acc_soft_sign(const acc_req *req, uint8_t *sig, size_t cap);

/* Runs req on the device: pauses the current ASYNC job until the device
 * answers (or blocks when there is none). Returns the signature's length
 * in sig, 0 on a device error or timeout. */
size_t acc_dev_sign(const acc_req *req, uint8_t *sig, size_t cap);

/* The provider's init and teardown: the device thread runs while an
 * instance of the provider is loaded. */
bool acc_dev_start(void);
void acc_dev_stop(void);

#endif
