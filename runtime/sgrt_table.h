/*
 * sgrt_table.h - the plan caches' table: items of one size, each found by
 * the key at its start.  sgrt_blas.c's products, sgrt_attn_cudnn.c's
 * attentions and sgrt_conv_cudnn.c's convolutions keep their plans in one,
 * looked up on every call: a hash of the key's bytes and a probe of an
 * open-addressing index, not a scan of every plan made.
 *
 * Keys are compared as bytes: a caller zeroes a key before it fills it,
 * so that padding compares equal.  An item's address holds until the next
 * sgrt_table_add, which may move them all.
 */
#ifndef SGRT_TABLE_H
#define SGRT_TABLE_H

#include <stddef.h>

typedef struct {
	unsigned char *items;  /* n items of size bytes, the key first */
	size_t size, key_size;
	int n, cap;
	int *slot;             /* nslot (a power of two): item index + 1, 0 free */
	int nslot;
} SgrtTable;

/* An empty table of items of item_size bytes whose first key_size bytes
 * are the key. */
void sgrt_table_init(SgrtTable *t, size_t item_size, size_t key_size);

/* The item with this key, or NULL. */
void *sgrt_table_find(const SgrtTable *t, const void *key);

/* A new item with this key (which must not be in t), zeroed past the
 * key; NULL when out of memory (t unchanged). */
void *sgrt_table_add(SgrtTable *t, const void *key);

/* The i-th item added (0 <= i < t->n). */
void *sgrt_table_at(const SgrtTable *t, int i);

/* Frees what t holds (not what its items point to) and empties it. */
void sgrt_table_free(SgrtTable *t);

#endif
