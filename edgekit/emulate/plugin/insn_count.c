/* edgekit's QEMU TCG plugin: executed aarch64 instructions, by class.
 *
 * At translation, each block's instructions are classed by their A64 encoding and the block gets a
 * record of its class counts; at execution, one inline add bumps the record's hit counter (or, with
 * atomic=on, a callback adds atomically: exact when several guest threads run at once). At exit the
 * totals (hits x class counts, over all records) go to QEMU's log as one line:
 *   edgekit-icount <tag> total=N simd_fp=N ... other=N windows=K before=N w_total=N w_simd_fp=N ... w_other=N
 *
 * A window is what ran between the runner's two marks around its timed runs, write(-1, NULL, MARK_BEGIN)
 * and write(-1, NULL, MARK_END) (EBADF at once, on a board too); "before" is the total at the first
 * begin mark. Counting inside one process leaves out what varies between processes (start, exit).
 * A second kind of window, between MARK_PREFILL_BEGIN and MARK_PREFILL_END (a language model's prompt,
 * where the timed window holds its decode steps), follows the line as
 *   p_windows=K p_bad_marks=K p_total=N p_simd_fp=N ... p_other=N
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qemu-plugin.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

enum { SIMD_FP, INTEGER, LOAD, STORE, BRANCH, OTHER, CLASSES };
static const char *const NAMES[CLASSES] = {"simd_fp", "integer", "load", "store", "branch", "other"};

typedef struct Block {
    uint64_t hits;
    uint32_t count[CLASSES];
    struct Block *next;
} Block;

static Block *blocks;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int atomic_counts;
static char tag[64] = "-";

#define SYS_WRITE 64 /* aarch64 */
#define MARK_FD UINT32_MAX /* fd -1: the kernel reads an int */
#define MARK_BEGIN 0x65646b62u /* "edkb" */
#define MARK_END 0x65646b65u   /* "edke" */
#define MARK_PREFILL_BEGIN 0x65646b70u /* "edkp" */
#define MARK_PREFILL_END 0x65646b71u   /* "edkq" */

typedef struct Window {
    uint32_t begin_mark, end_mark;
    uint64_t sum[CLASSES], began[CLASSES];
    unsigned count, bad_marks;
    int open;
} Window;

enum { TIMED, PREFILL, KINDS };
static Window windows[KINDS] = {{MARK_BEGIN, MARK_END}, {MARK_PREFILL_BEGIN, MARK_PREFILL_END}};
static uint64_t before[CLASSES];
static int marked;

static int load_or_store(uint32_t insn)
{
    uint32_t op0 = (insn >> 28) & 3; /* bits 29:28 */
    if (op0 == 1 && !((insn >> 24) & 1))
        return LOAD; /* load register (literal) */
    if (op0 == 3) { /* load/store register: opc in bits 23:22 */
        uint32_t opc = (insn >> 22) & 3, vector = (insn >> 26) & 1, size = insn >> 30;
        if (opc == 0 || (vector && size == 0 && opc == 2))
            return STORE; /* STR*, STR Qt */
        return LOAD; /* LDR*, LDRS*, PRFM, atomics (read first) */
    }
    return ((insn >> 22) & 1) ? LOAD : STORE; /* exclusive, pair, SIMD structures: the L bit */
}

static int classify(uint32_t insn)
{
    uint32_t op0 = (insn >> 25) & 0xf; /* the A64 top-level group, bits 28:25 */
    if (op0 == 0x8 || op0 == 0x9)
        return INTEGER; /* data processing, immediate */
    if (op0 == 0xa || op0 == 0xb) {
        if ((insn >> 24) == 0xd4 || (insn >> 22) == 0x354)
            return OTHER; /* exception generation, system (hints, barriers, MRS/MSR) */
        return BRANCH;
    }
    if ((op0 & 0x5) == 0x4)
        return load_or_store(insn);
    if ((op0 & 0x7) == 0x5)
        return INTEGER; /* data processing, register */
    if ((op0 & 0x7) == 0x7)
        return SIMD_FP; /* data processing, SIMD and floating point */
    return OTHER; /* SVE, SME, unallocated */
}

static void on_exec(unsigned int vcpu, void *userdata)
{
    __atomic_fetch_add(&((Block *)userdata)->hits, 1, __ATOMIC_RELAXED);
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    Block *block = calloc(1, sizeof(Block));
    if (!block)
        abort();
    size_t n = qemu_plugin_tb_n_insns(tb);
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        uint32_t word = 0;
        if (qemu_plugin_insn_size(insn) == sizeof(word)) {
            memcpy(&word, qemu_plugin_insn_data(insn), sizeof(word));
            block->count[classify(word)]++;
        } else {
            block->count[OTHER]++;
        }
    }
    pthread_mutex_lock(&lock);
    block->next = blocks;
    blocks = block;
    pthread_mutex_unlock(&lock);
    if (atomic_counts)
        qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, QEMU_PLUGIN_CB_NO_REGS, block);
    else
        qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &block->hits, 1);
}

static void totals_now(uint64_t totals[CLASSES])
{
    memset(totals, 0, CLASSES * sizeof totals[0]);
    for (Block *b = blocks; b; b = b->next) {
        uint64_t hits = __atomic_load_n(&b->hits, __ATOMIC_RELAXED);
        for (int c = 0; c < CLASSES; c++)
            totals[c] += hits * b->count[c];
    }
}

static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1, uint64_t a2, uint64_t a3,
                       uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8)
{
    if (num != SYS_WRITE || (uint32_t)a1 != MARK_FD)
        return;
    Window *w = NULL;
    for (int k = 0; k < KINDS; k++)
        if (a3 == windows[k].begin_mark || a3 == windows[k].end_mark)
            w = &windows[k];
    if (!w)
        return;
    uint64_t now[CLASSES];
    pthread_mutex_lock(&lock);
    totals_now(now);
    if (a3 == w->begin_mark) {
        if (w->open)
            w->bad_marks++;
        if (w == &windows[TIMED] && !marked) {
            memcpy(before, now, sizeof before);
            marked = 1;
        }
        memcpy(w->began, now, sizeof w->began);
        w->open = 1;
    } else if (!w->open) {
        w->bad_marks++;
    } else {
        for (int c = 0; c < CLASSES; c++)
            w->sum[c] += now[c] - w->began[c];
        w->count++;
        w->open = 0;
    }
    pthread_mutex_unlock(&lock);
}

static int put_counts(char *line, size_t size, int used, const char *prefix, const uint64_t counts[CLASSES])
{
    uint64_t total = 0;
    for (int c = 0; c < CLASSES; c++)
        total += counts[c];
    if (used >= 0 && (size_t)used < size)
        used += snprintf(line + used, size - used, " %stotal=%" PRIu64, prefix, total);
    for (int c = 0; c < CLASSES && used >= 0 && (size_t)used < size; c++)
        used += snprintf(line + used, size - used, " %s%s=%" PRIu64, prefix, NAMES[c], counts[c]);
    return used;
}

static void on_guest_exit(qemu_plugin_id_t id, void *userdata)
{
    uint64_t totals[CLASSES];
    pthread_mutex_lock(&lock);
    totals_now(totals);
    for (int k = 0; k < KINDS; k++)
        windows[k].bad_marks += windows[k].open;
    pthread_mutex_unlock(&lock);
    uint64_t before_total = 0;
    for (int c = 0; c < CLASSES; c++)
        before_total += before[c];
    char line[1024];
    int used = snprintf(line, sizeof line, "edgekit-icount %s", tag);
    used = put_counts(line, sizeof line, used, "", totals);
    if (used >= 0 && (size_t)used < sizeof line)
        used += snprintf(line + used, sizeof line - used, " windows=%u bad_marks=%u before=%" PRIu64,
                         windows[TIMED].count, windows[TIMED].bad_marks, before_total);
    used = put_counts(line, sizeof line, used, "w_", windows[TIMED].sum);
    if (used >= 0 && (size_t)used < sizeof line)
        used += snprintf(line + used, sizeof line - used, " p_windows=%u p_bad_marks=%u", windows[PREFILL].count,
                         windows[PREFILL].bad_marks);
    used = put_counts(line, sizeof line, used, "p_", windows[PREFILL].sum);
    if (used > 0 && (size_t)used < sizeof line - 1) {
        line[used] = '\n';
        line[used + 1] = '\0';
    }
    qemu_plugin_outs(line);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv)
{
    if (strcmp(info->target_name, "aarch64") != 0)
        return -1;
    for (int i = 0; i < argc; i++) {
        if (strncmp(argv[i], "tag=", 4) == 0 && strlen(argv[i] + 4) < sizeof tag) {
            strcpy(tag, argv[i] + 4);
        } else if (strcmp(argv[i], "atomic=on") == 0) {
            atomic_counts = 1;
        } else if (strcmp(argv[i], "atomic=off") != 0) {
            fprintf(stderr, "insn_count: unknown argument %s\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
    qemu_plugin_register_atexit_cb(id, on_guest_exit, NULL);
    return 0;
}
