/*
 * sgrt_out.c - writing an output file as compilers do (sgrt_out.h); one
 * writer for sgc (-o, --header, -MF, `sgc run --out`) and libsgrt (the
 * driver's --out, safetensors saves, --trace).
 */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sgrt_out.h"

/* The mode a new file gets: 0666 less the umask (read without a lasting
 * change: umask has no query). */
static mode_t
new_file_mode(void)
{
	mode_t m = umask(022);
	umask(m);
	return 0666 & ~m;
}

static void
out_clear(SgrtOut *o)
{
	o->f = NULL;
	o->tmp = NULL;
	o->target = NULL;
}

/* Opens path itself for writing (no temporary file) into o->f. */
static int
open_in_place(SgrtOut *o, const char *path, int flags)
{
	int e, fd = open(path, flags | O_CLOEXEC | O_NOCTTY, 0666);
	if (fd >= 0 && (o->f = fdopen(fd, "wb")) != NULL)
		return 0;
	e = errno;
	if (fd >= 0)
		close(fd);
	return e;
}

int
sgrt_out_open(SgrtOut *o, const char *path)
{
	struct stat st;
	int fd, e;
	size_t n;

	out_clear(o);
	/* A symlink is written through: its target is the file. */
	o->target = realpath(path, NULL);
	if (!o->target) {
		if (errno != ENOENT) /* (ENOENT: no file yet, or a dangling link) */
			return errno;
		o->target = strdup(path);
		if (!o->target)
			return ENOMEM;
	}
	if (stat(o->target, &st) == 0 && !S_ISREG(st.st_mode)) {
		/* A device, FIFO or socket is written in place (never replaced). */
		if (S_ISDIR(st.st_mode)) {
			e = EISDIR;
			goto fail;
		}
		if ((e = open_in_place(o, o->target, O_WRONLY)))
			goto fail;
		return 0;
	}
	if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode) && stat(path, &st) != 0) {
		/* Dangling: the link's target is created through it. */
		if ((e = open_in_place(o, path, O_WRONLY | O_CREAT | O_TRUNC)))
			goto fail;
		return 0;
	}
	/* A regular file, or none: a new file beside it, renamed over it. */
	n = strlen(o->target);
	o->tmp = malloc(n + 16);
	if (!o->tmp) {
		e = ENOMEM;
		goto fail;
	}
	memcpy(o->tmp, o->target, n);
	memcpy(o->tmp + n, ".tmp.XXXXXX", 12);
	fd = mkstemp(o->tmp);
	if (fd < 0) {
		e = errno;
		free(o->tmp);
		o->tmp = NULL;
		goto fail;
	}
	if (fchmod(fd, stat(o->target, &st) == 0 ? st.st_mode & 07777
	                                         : new_file_mode()) != 0 ||
	    !(o->f = fdopen(fd, "wb"))) {
		e = errno;
		close(fd);
		unlink(o->tmp);
		free(o->tmp);
		o->tmp = NULL;
		goto fail;
	}
	return 0;
fail:
	free(o->target);
	out_clear(o);
	return e;
}

int
sgrt_out_commit(SgrtOut *o)
{
	int e = 0;
	if (ferror(o->f))
		e = EIO;
	if (fclose(o->f) != 0 && !e)
		e = errno ? errno : EIO;
	o->f = NULL;
	if (o->tmp) {
		if (!e && rename(o->tmp, o->target) != 0)
			e = errno;
		if (e)
			unlink(o->tmp);
	}
	free(o->tmp);
	free(o->target);
	out_clear(o);
	return e;
}

void
sgrt_out_abort(SgrtOut *o)
{
	if (o->f)
		fclose(o->f);
	if (o->tmp)
		unlink(o->tmp);
	free(o->tmp);
	free(o->target);
	out_clear(o);
}

int
sgrt_out_file(const char *path, const void *data, size_t len)
{
	SgrtOut o;
	int e = sgrt_out_open(&o, path);
	if (e)
		return e;
	if (len && fwrite(data, 1, len, o.f) != len) {
		e = errno ? errno : EIO;
		sgrt_out_abort(&o);
		return e;
	}
	return sgrt_out_commit(&o);
}

int
sgrt_path_for_rank(char *buf, size_t len, const char *path, int rank)
{
	const char *p = strstr(path, "{rank}");
	int n;

	if (!p)
		n = snprintf(buf, len, "%s", path);
	else
		n = snprintf(buf, len, "%.*s%d%s", (int)(p - path), path, rank,
		             p + 6);
	return n < 0 || (size_t)n >= len ? 2 /* SGRT_EUSAGE */ : 0;
}
