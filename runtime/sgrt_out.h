/*
 * sgrt_out.h - writing an output file as compilers do, shared by sgc and
 * libsgrt (runtime/sgrt_out.c, in the host part of the runtime):
 *
 *   - a path that exists and is not a regular file (a device such as
 *     /dev/null, a FIFO) is opened and written in place, never replaced;
 *   - a symlink is written through: what it points to is the file (a
 *     dangling one gets its target created);
 *   - otherwise the data goes to a new file made with mkstemp (O_EXCL,
 *     mode 0600 until written; so nothing planted is followed) in the
 *     target's directory, given the target's mode (a new file: 0666 less
 *     the umask), and renamed over the target once everything is
 *     written, so that a failure leaves the old file, or none, and no
 *     partial one.
 *
 * The sgrt_out_ functions return 0 or an errno value.
 */
#ifndef SGRT_OUT_H
#define SGRT_OUT_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
	FILE *f;       /* write here */
	char *tmp;     /* the mkstemp file, or NULL when written in place */
	char *target;  /* the file that receives the data */
} SgrtOut;

int sgrt_out_open(SgrtOut *o, const char *path);
/* Closes o->f and, when all writes succeeded, renames the temporary file
 * over the target; else removes it. */
int sgrt_out_commit(SgrtOut *o);
/* Closes and removes what open made (a file written in place keeps what
 * was written). */
void sgrt_out_abort(SgrtOut *o);
/* open, one write, commit. */
int sgrt_out_file(const char *path, const void *data, size_t len);

/* The file of one rank: path with its first "{rank}" replaced by the
 * rank (the driver and `sgc run` name each rank's files so); a path
 * without it is the same for every rank.  0, or 2 (SGRT_EUSAGE) when
 * buf is too small. */
int sgrt_path_for_rank(char *buf, size_t len, const char *path, int rank);

#endif
