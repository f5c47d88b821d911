/* SPDX-License-Identifier: Apache-2.0 */
/* P6 names: opcode names and types for metrics labels, error texts, and the
 * opcode classification that the dispatcher switches on (P4). All strings
 * are static, so every function here is thread-safe and never allocates. */
#include "keyless/protocol.h"

#include <stddef.h>

/* "Op(N)" for every byte value, precomputed so kl_op_name can return a static
 * string for unknown opcodes without formatting (the reference prints the
 * decimal value). */
static const char *const op_unknown_names[256] = {
    "Op(0)",   "Op(1)",   "Op(2)",   "Op(3)",   "Op(4)",   "Op(5)",   "Op(6)",
    "Op(7)",   "Op(8)",   "Op(9)",   "Op(10)",  "Op(11)",  "Op(12)",  "Op(13)",
    "Op(14)",  "Op(15)",  "Op(16)",  "Op(17)",  "Op(18)",  "Op(19)",  "Op(20)",
    "Op(21)",  "Op(22)",  "Op(23)",  "Op(24)",  "Op(25)",  "Op(26)",  "Op(27)",
    "Op(28)",  "Op(29)",  "Op(30)",  "Op(31)",  "Op(32)",  "Op(33)",  "Op(34)",
    "Op(35)",  "Op(36)",  "Op(37)",  "Op(38)",  "Op(39)",  "Op(40)",  "Op(41)",
    "Op(42)",  "Op(43)",  "Op(44)",  "Op(45)",  "Op(46)",  "Op(47)",  "Op(48)",
    "Op(49)",  "Op(50)",  "Op(51)",  "Op(52)",  "Op(53)",  "Op(54)",  "Op(55)",
    "Op(56)",  "Op(57)",  "Op(58)",  "Op(59)",  "Op(60)",  "Op(61)",  "Op(62)",
    "Op(63)",  "Op(64)",  "Op(65)",  "Op(66)",  "Op(67)",  "Op(68)",  "Op(69)",
    "Op(70)",  "Op(71)",  "Op(72)",  "Op(73)",  "Op(74)",  "Op(75)",  "Op(76)",
    "Op(77)",  "Op(78)",  "Op(79)",  "Op(80)",  "Op(81)",  "Op(82)",  "Op(83)",
    "Op(84)",  "Op(85)",  "Op(86)",  "Op(87)",  "Op(88)",  "Op(89)",  "Op(90)",
    "Op(91)",  "Op(92)",  "Op(93)",  "Op(94)",  "Op(95)",  "Op(96)",  "Op(97)",
    "Op(98)",  "Op(99)",  "Op(100)", "Op(101)", "Op(102)", "Op(103)", "Op(104)",
    "Op(105)", "Op(106)", "Op(107)", "Op(108)", "Op(109)", "Op(110)", "Op(111)",
    "Op(112)", "Op(113)", "Op(114)", "Op(115)", "Op(116)", "Op(117)", "Op(118)",
    "Op(119)", "Op(120)", "Op(121)", "Op(122)", "Op(123)", "Op(124)", "Op(125)",
    "Op(126)", "Op(127)", "Op(128)", "Op(129)", "Op(130)", "Op(131)", "Op(132)",
    "Op(133)", "Op(134)", "Op(135)", "Op(136)", "Op(137)", "Op(138)", "Op(139)",
    "Op(140)", "Op(141)", "Op(142)", "Op(143)", "Op(144)", "Op(145)", "Op(146)",
    "Op(147)", "Op(148)", "Op(149)", "Op(150)", "Op(151)", "Op(152)", "Op(153)",
    "Op(154)", "Op(155)", "Op(156)", "Op(157)", "Op(158)", "Op(159)", "Op(160)",
    "Op(161)", "Op(162)", "Op(163)", "Op(164)", "Op(165)", "Op(166)", "Op(167)",
    "Op(168)", "Op(169)", "Op(170)", "Op(171)", "Op(172)", "Op(173)", "Op(174)",
    "Op(175)", "Op(176)", "Op(177)", "Op(178)", "Op(179)", "Op(180)", "Op(181)",
    "Op(182)", "Op(183)", "Op(184)", "Op(185)", "Op(186)", "Op(187)", "Op(188)",
    "Op(189)", "Op(190)", "Op(191)", "Op(192)", "Op(193)", "Op(194)", "Op(195)",
    "Op(196)", "Op(197)", "Op(198)", "Op(199)", "Op(200)", "Op(201)", "Op(202)",
    "Op(203)", "Op(204)", "Op(205)", "Op(206)", "Op(207)", "Op(208)", "Op(209)",
    "Op(210)", "Op(211)", "Op(212)", "Op(213)", "Op(214)", "Op(215)", "Op(216)",
    "Op(217)", "Op(218)", "Op(219)", "Op(220)", "Op(221)", "Op(222)", "Op(223)",
    "Op(224)", "Op(225)", "Op(226)", "Op(227)", "Op(228)", "Op(229)", "Op(230)",
    "Op(231)", "Op(232)", "Op(233)", "Op(234)", "Op(235)", "Op(236)", "Op(237)",
    "Op(238)", "Op(239)", "Op(240)", "Op(241)", "Op(242)", "Op(243)", "Op(244)",
    "Op(245)", "Op(246)", "Op(247)", "Op(248)", "Op(249)", "Op(250)", "Op(251)",
    "Op(252)", "Op(253)", "Op(254)", "Op(255)",
};

const char *kl_op_name(uint8_t op)
{
    switch (op) {
    case KL_OP_RSA_DECRYPT: return "OpRSADecrypt";
    case KL_OP_RSA_SIGN_MD5SHA1: return "OpRSASignMD5SHA1";
    case KL_OP_RSA_SIGN_SHA1: return "OpRSASignSHA1";
    case KL_OP_RSA_SIGN_SHA224: return "OpRSASignSHA224";
    case KL_OP_RSA_SIGN_SHA256: return "OpRSASignSHA256";
    case KL_OP_RSA_SIGN_SHA384: return "OpRSASignSHA384";
    case KL_OP_RSA_SIGN_SHA512: return "OpRSASignSHA512";
    case KL_OP_ECDSA_SIGN_MD5SHA1: return "OpECDSASignMD5SHA1";
    case KL_OP_ECDSA_SIGN_SHA1: return "OpECDSASignSHA1";
    case KL_OP_ECDSA_SIGN_SHA224: return "OpECDSASignSHA224";
    case KL_OP_ECDSA_SIGN_SHA256: return "OpECDSASignSHA256";
    case KL_OP_ECDSA_SIGN_SHA384: return "OpECDSASignSHA384";
    case KL_OP_ECDSA_SIGN_SHA512: return "OpECDSASignSHA512";
    case KL_OP_ED25519_SIGN: return "OpEd25519Sign";
    case KL_OP_SEAL: return "OpSeal";
    case KL_OP_UNSEAL: return "OpUnseal";
    case KL_OP_RPC: return "OpRPC";
    case KL_OP_CUSTOM: return "OpCustom";
    case KL_OP_RSA_PSS_SIGN_SHA256: return "OpRSAPSSSignSHA256";
    case KL_OP_RSA_PSS_SIGN_SHA384: return "OpRSAPSSSignSHA384";
    case KL_OP_RSA_PSS_SIGN_SHA512: return "OpRSAPSSSignSHA512";
    case KL_OP_RESPONSE: return "OpResponse";
    case KL_OP_PING: return "OpPing";
    case KL_OP_PONG: return "OpPong";
    case KL_OP_ERROR: return "OpError";
    default: return op_unknown_names[op];
    }
}

kl_op_class kl_op_classify(uint8_t op)
{
    if (op >= KL_OP_RSA_DECRYPT && op <= KL_OP_RSA_SIGN_SHA512)
        return KL_OPC_RSA;
    if (op >= KL_OP_RSA_PSS_SIGN_SHA256 && op <= KL_OP_RSA_PSS_SIGN_SHA512)
        return KL_OPC_RSA_PSS;
    if (op >= KL_OP_ECDSA_SIGN_MD5SHA1 && op <= KL_OP_ECDSA_SIGN_SHA512)
        return KL_OPC_ECDSA;
    switch (op) {
    case KL_OP_ED25519_SIGN: return KL_OPC_ED25519;
    case KL_OP_SEAL:
    case KL_OP_UNSEAL: return KL_OPC_SEAL;
    case KL_OP_RPC: return KL_OPC_RPC;
    case KL_OP_CUSTOM: return KL_OPC_CUSTOM;
    case KL_OP_PING: return KL_OPC_PING;
    /* P4: a response opcode in a request is `unexpected opcode`. */
    case KL_OP_RESPONSE:
    case KL_OP_PONG:
    case KL_OP_ERROR: return KL_OPC_RESPONSE_ONLY;
    /* Everything else, 0x00 and the old raw decrypt 0x08 included, is
     * `bad opcode`. */
    default: return KL_OPC_INVALID;
    }
}

const char *kl_op_type(uint8_t op)
{
    switch (kl_op_classify(op)) {
    case KL_OPC_RSA:
    case KL_OPC_RSA_PSS: return "rsa";
    case KL_OPC_ECDSA: return "ecdsa";
    case KL_OPC_ED25519: return "ed25519";
    case KL_OPC_CUSTOM: return "custom";
    case KL_OPC_RPC: return "rpc";
    case KL_OPC_SEAL:
    case KL_OPC_PING:
    case KL_OPC_RESPONSE_ONLY: return "other";
    case KL_OPC_INVALID: break;
    }
    return "unknown";
}

size_t kl_op_digest_len(uint8_t op)
{
    switch (op) {
    case KL_OP_RSA_SIGN_MD5SHA1:
    case KL_OP_ECDSA_SIGN_MD5SHA1: return 36; /* MD5 (16) || SHA-1 (20) */
    case KL_OP_RSA_SIGN_SHA1:
    case KL_OP_ECDSA_SIGN_SHA1: return 20;
    case KL_OP_RSA_SIGN_SHA224:
    case KL_OP_ECDSA_SIGN_SHA224: return 28;
    case KL_OP_RSA_SIGN_SHA256:
    case KL_OP_ECDSA_SIGN_SHA256:
    case KL_OP_RSA_PSS_SIGN_SHA256: return 32;
    case KL_OP_RSA_SIGN_SHA384:
    case KL_OP_ECDSA_SIGN_SHA384:
    case KL_OP_RSA_PSS_SIGN_SHA384: return 48;
    case KL_OP_RSA_SIGN_SHA512:
    case KL_OP_ECDSA_SIGN_SHA512:
    case KL_OP_RSA_PSS_SIGN_SHA512: return 64;
    default: return 0;
    }
}

/* P6: the reference's texts, in code order; metrics and logs use them. */
static const char *const err_texts[KL_ERR_MAX + 1] = {
    "no error",
    "cryptography error",
    "key not found due to no matching SKI/SNI/ServerIP",
    "read failure",
    "version mismatch",
    "bad opcode",
    "unexpected opcode",
    "malformed message",
    "internal error",
    "certificate not found",
    "sealing key expired",
    "remote configuration error",
};

static const char *const err_names[KL_ERR_MAX + 1] = {
    "none",
    "crypto",
    "key_not_found",
    "read",
    "version_mismatch",
    "bad_opcode",
    "unexpected_opcode",
    "format",
    "internal",
    "cert_not_found",
    "expired",
    "remote_config",
};

const char *kl_err_text(uint8_t err)
{
    return err <= KL_ERR_MAX ? err_texts[err] : "unknown error";
}

const char *kl_err_name(uint8_t err)
{
    return err <= KL_ERR_MAX ? err_names[err] : "unknown";
}
