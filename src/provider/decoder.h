/* SPDX-License-Identifier: Apache-2.0 */
/* What the decoders hand to the keymgmt (see decoder.c). */
#ifndef KL_PROVIDER_DECODER_H
#define KL_PROVIDER_DECODER_H

#include "provider/key.h"

/* The data structure name of a key reference body between the decoders. */
#define KLP_REF_STRUCTURE "keyless-reference"
#define KLP_HANDLE_MAGIC "KLPKEY01"

/* The object reference our decoders pass to our keymgmt's load: 16 bytes,
 * so a keymgmt that expects a bare pointer (8 bytes) refuses it. */
typedef struct klp_keyref_handle {
    char magic[8];
    klp_key *key;
} klp_keyref_handle;

extern const OSSL_DISPATCH klp_pem_decoder_functions[];

#endif
