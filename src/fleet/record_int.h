/* SPDX-License-Identifier: Apache-2.0 */
/* What record.c and record_set.c share: the JSON loading with the format
 * check, an integer field in a range, and each field's rule for messages. */
#ifndef KL_FLEET_RECORD_INT_H
#define KL_FLEET_RECORD_INT_H

#include <jansson.h>

#include "fleet/record.h"

/* Loads an object whose "v" is KL_FLEET_FORMAT; what names it in err. */
kl_status kl_fleet_json_load(const uint8_t *json, size_t len, const char *what,
                             json_t **root, char *err, size_t errlen);
/* An integer field within [lo, hi]; absent is fine unless required (out
 * is then untouched). */
bool kl_fleet_json_int(const json_t *o, const char *field, bool required,
                       int64_t lo, int64_t hi, int64_t *out);
/* What a field must hold, for the error message. */
const char *kl_fleet_field_rule(const char *field);

#endif
