/*
 * classifier_app.c - a program built on the C API that sgc generates
 * (`sgc classifier.sg -o classifier_api.cu --header classifier.h`), rather
 * than on its --main driver.
 *
 * It creates the model on the current GPU, loads params from argv[1] when
 * given (else sgc's deterministic initialisation from seed 0, the values
 * `sgc run` uses), runs one call on the input x[i][j] = sin(i + j), and
 * prints each row's most likely class and the sum of its probabilities,
 * which must be 1: the exit status is 1 when one is not.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

#include "classifier.h"

enum { B = 8, D = 32, C = 10 };

/* Reports what failed, with the model's own message when there is one. */
static int
fail(classifier_model *m, const char *what)
{
	fprintf(stderr, "classifier_app: %s failed: %s\n", what,
	        m ? classifier_last_error(m) : "out of memory");
	classifier_destroy(m);
	return 1;
}

int
main(int argc, char **argv)
{
	static float x[B * D], p[B * C];
	for (int i = 0; i < B; i++)
		for (int j = 0; j < D; j++)
			x[i * D + j] = sinf((float)(i + j));

	classifier_model *m = NULL;
	if (classifier_create(&m, -1))
		return fail(m, "classifier_create");
	if (classifier_load(m, argc > 1 ? argv[1] : NULL, 0))
		return fail(m, "classifier_load");

	float *dx = NULL, *dp = NULL;
	if (cudaMalloc((void **)&dx, sizeof x) != cudaSuccess ||
	    cudaMalloc((void **)&dp, sizeof p) != cudaSuccess ||
	    cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice) != cudaSuccess)
		return fail(m, "cudaMalloc/cudaMemcpy");
	/* One call on the legacy default stream; the copy back waits for it. */
	if (classifier_call(m, 0, dx, dp))
		return fail(m, "classifier_call");
	if (cudaMemcpy(p, dp, sizeof p, cudaMemcpyDeviceToHost) != cudaSuccess)
		return fail(m, "cudaMemcpy");

	int bad = 0;
	for (int i = 0; i < B; i++) {
		int best = 0;
		double sum = 0;
		for (int k = 0; k < C; k++) {
			sum += p[i * C + k];
			if (p[i * C + k] > p[i * C + best])
				best = k;
		}
		printf("row %d: class %d (p=%.4f), sum %.6f\n", i, best, p[i * C + best], sum);
		if (!(fabs(sum - 1.0) < 1e-4))
			bad = 1;
	}
	printf("peak device memory of a call: %zu bytes\n", classifier_peak_bytes(m));
	cudaFree(dx);
	cudaFree(dp);
	classifier_destroy(m);
	return bad;
}
