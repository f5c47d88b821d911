/* SPDX-License-Identifier: Apache-2.0 */
/* Helpers shared by the codec's own files; not part of the public API. */
#ifndef KL_PROTO_INTERNAL_H
#define KL_PROTO_INTERNAL_H

#include <stddef.h>

#include "core/cursor.h"

/* Appends the P5 padding item that takes a message of w->len bytes to
 * total bytes (as computed by kl_padded_message_len); writes nothing when
 * total == w->len. */
KL_WUR kl_status kl_proto_write_padding(kl_writer *w, size_t total);

#endif
