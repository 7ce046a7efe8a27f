/*
 * test_sgrt_table.c - the plan caches' table (runtime/sgrt_table.c) on
 * the CPU: items found by their key's bytes across the index's growth,
 * keys not added not found (also ones that differ in a single byte or
 * collide in the index), items zeroed past their key and kept in the
 * order added, and a freed table empty and usable again.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "sgrt_table.h"

/* A key as the caches' are: ints and 64-bit sizes, zeroed, then filled. */
typedef struct {
	int dir, dtype;
	int64_t m, n, k;
} Key;

typedef struct {
	Key key;
	int value;
	double payload[5];
} Item;

static Key
key_of(int i)
{
	Key k;
	memset(&k, 0, sizeof k);
	k.dir = i % 3;
	k.dtype = 1 + i % 4;
	k.m = 16384;
	k.n = 64 * (int64_t)(i / 12);
	k.k = 2048 + i;
	return k;
}

static void
test_add_find_grow(void **state)
{
	SgrtTable t;
	enum { N = 1000 };
	(void)state;
	sgrt_table_init(&t, sizeof(Item), sizeof(Key));
	Key k0 = key_of(0);
	assert_null(sgrt_table_find(&t, &k0)); /* empty, no index yet */
	for (int i = 0; i < N; i++) {
		Key k = key_of(i);
		assert_null(sgrt_table_find(&t, &k));
		Item *it = sgrt_table_add(&t, &k);
		assert_non_null(it);
		assert_memory_equal(&it->key, &k, sizeof k);
		assert_int_equal(it->value, 0); /* zeroed past the key */
		for (int j = 0; j < 5; j++)
			assert_true(it->payload[j] == 0.0);
		it->value = 7 * i + 1;
		/* the index stays at most half full */
		assert_true(2 * t.n <= t.nslot);
	}
	assert_int_equal(t.n, N);
	/* every item found after all the growth, at its place in the order */
	for (int i = 0; i < N; i++) {
		Key k = key_of(i);
		Item *it = sgrt_table_find(&t, &k);
		assert_non_null(it);
		assert_int_equal(it->value, 7 * i + 1);
		assert_ptr_equal(it, sgrt_table_at(&t, i));
	}
	/* keys never added: one field off, or one byte of a field */
	for (int i = 0; i < N; i++) {
		Key k = key_of(i);
		k.m = 16383;
		assert_null(sgrt_table_find(&t, &k));
		k = key_of(i);
		((unsigned char *)&k.k)[7] ^= 0x80;
		assert_null(sgrt_table_find(&t, &k));
	}
	sgrt_table_free(&t);
	assert_int_equal(t.n, 0);
	assert_null(sgrt_table_find(&t, &k0));
	/* usable again after free, with the same sizes */
	Item *it = sgrt_table_add(&t, &k0);
	assert_non_null(it);
	assert_ptr_equal(sgrt_table_find(&t, &k0), it);
	sgrt_table_free(&t);
}

/* Keys whose hashes share the low bits still found: a table of 16 slots
 * holds at most 8 items, so among 8 keys some probe past others. */
static void
test_probe_chains(void **state)
{
	SgrtTable t;
	(void)state;
	sgrt_table_init(&t, sizeof(Item), sizeof(Key));
	for (int round = 0; round < 50; round++) {
		for (int i = 0; i < 8; i++) {
			Key k = key_of(round * 8 + i);
			Item *it = sgrt_table_add(&t, &k);
			assert_non_null(it);
			it->value = round * 8 + i;
		}
		for (int i = 0; i < t.n; i++) {
			Key k = key_of(i);
			Item *it = sgrt_table_find(&t, &k);
			assert_non_null(it);
			assert_int_equal(it->value, i);
		}
		/* an index with no free slot would loop: there always is one */
		int used = 0;
		for (int j = 0; j < t.nslot; j++)
			used += t.slot[j] != 0;
		assert_int_equal(used, t.n);
		assert_true(used < t.nslot);
	}
	sgrt_table_free(&t);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_find_grow),
		cmocka_unit_test(test_probe_chains),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
