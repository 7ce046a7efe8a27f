/*
 * sgrt_table.c - the plan caches' table (sgrt_table.h).  Items live in
 * one array in the order they were added; an open-addressing index with
 * linear probing maps a key's hash (FNV-1a over its bytes) to an item,
 * kept at most half full and rebuilt when it doubles.  Nothing is ever
 * removed: a cache's plans live as long as its model.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sgrt_table.h"

static uint64_t
hash(const void *key, size_t n)
{
	const unsigned char *p = key;
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

void
sgrt_table_init(SgrtTable *t, size_t item_size, size_t key_size)
{
	memset(t, 0, sizeof *t);
	t->size = item_size;
	t->key_size = key_size;
}

void *
sgrt_table_at(const SgrtTable *t, int i)
{
	return t->items + (size_t)i * t->size;
}

void *
sgrt_table_find(const SgrtTable *t, const void *key)
{
	if (!t->nslot)
		return NULL;
	size_t mask = (size_t)t->nslot - 1;
	for (size_t j = hash(key, t->key_size) & mask;; j = (j + 1) & mask) {
		int s = t->slot[j];
		if (!s)
			return NULL;
		void *it = sgrt_table_at(t, s - 1);
		if (memcmp(it, key, t->key_size) == 0)
			return it;
	}
}

/* Puts item i in index slot (nslot entries, a power of two, not full). */
static void
place(const SgrtTable *t, int *slot, int nslot, int i)
{
	size_t mask = (size_t)nslot - 1;
	size_t j = hash(sgrt_table_at(t, i), t->key_size) & mask;
	while (slot[j])
		j = (j + 1) & mask;
	slot[j] = i + 1;
}

void *
sgrt_table_add(SgrtTable *t, const void *key)
{
	if (t->n == t->cap) {
		int cap = t->cap ? 2 * t->cap : 8;
		unsigned char *items = realloc(t->items, (size_t)cap * t->size);
		if (!items)
			return NULL;
		t->items = items;
		t->cap = cap;
	}
	if (2 * (t->n + 1) > t->nslot) {
		int nslot = t->nslot ? 2 * t->nslot : 16;
		int *slot = calloc((size_t)nslot, sizeof *slot);
		if (!slot)
			return NULL;
		for (int i = 0; i < t->n; i++)
			place(t, slot, nslot, i);
		free(t->slot);
		t->slot = slot;
		t->nslot = nslot;
	}
	unsigned char *it = sgrt_table_at(t, t->n);
	memset(it, 0, t->size);
	memcpy(it, key, t->key_size);
	place(t, t->slot, t->nslot, t->n);
	t->n++;
	return it;
}

void
sgrt_table_free(SgrtTable *t)
{
	free(t->items);
	free(t->slot);
	sgrt_table_init(t, t->size, t->key_size);
}
