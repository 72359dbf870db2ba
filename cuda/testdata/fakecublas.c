// A fake libcublas for tests without a GPU: checks that the Go side passes
// cublasGemmEx's 19 arguments in order and with the right enum values.
//
// Variants, chosen with -D when the test builds it:
//   FAKE_CUBLAS_MAJOR=M  the major version cublasGetProperty reports (default 12; 12.9.3)
//   FAKE_EMU             exports sbemu_describe, as stepbench's emulated cuBLAS does
typedef unsigned long long ptr64;

#ifndef FAKE_CUBLAS_MAJOR
#define FAKE_CUBLAS_MAJOR 12
#endif
#ifdef FAKE_EMU
const char *sbemu_describe(void) { return "fake emulated cuBLAS (test)"; }
#endif

int cublasGetProperty(int prop, int *v) {
	static const int version[3] = {FAKE_CUBLAS_MAJOR, 9, 3};
	if (prop < 0 || prop > 2) return 7;
	*v = version[prop];
	return 0;
}
int cublasCreate_v2(void **h) { *h = (void *)0x1; return 0; }
int cublasDestroy_v2(void *h) { return h == (void *)0x1 ? 0 : 7; }
int cublasSetStream_v2(void *h, void *s) { return 0; }
int cublasSetWorkspace_v2(void *h, void *ws, unsigned long bytes) {
	return (ws == (void *)0x400 && bytes == 4096) ? 0 : 7;
}
// Accepts exactly GemmBF16(true, false, 5, 3, 7, 1, 0x100, 7, 0x200, 7, 0.5, 0x300, 5).
int cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const void *a, int at, int lda,
                 const void *b, int bt, int ldb, const float *beta, void *c, int ct, int ldc, int compute, int algo) {
	if (h != (void *)0x1 || ta != 1 || tb != 0 || m != 5 || n != 3 || k != 7) return 7;
	if (*alpha != 1.0f || a != (void *)0x100 || at != 14 || lda != 7) return 7;
	if (b != (void *)0x200 || bt != 14 || ldb != 7 || *beta != 0.5f) return 7;
	if (c != (void *)0x300 || ct != 14 || ldc != 5 || compute != 68 || algo != -1) return 7;
	return 0;
}
