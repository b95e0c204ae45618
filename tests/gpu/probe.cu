// A small CUDA program the GPU enforcement tests run under libvgpu.
//   probe alloc           allocate 64 MiB blocks until the driver refuses;
//                         prints "allocated <bytes> error <code> <name>"
//   probe compute <secs>  run a compute-bound kernel for <secs> seconds;
//                         prints "kernels <count> seconds <elapsed>"
//   probe hold <MiB>      allocate <MiB>, print "holding", wait for a line on stdin
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

__global__ void burn(float *out, int rounds) {
  float x = threadIdx.x * 0.001f;
  for (int i = 0; i < rounds; ++i) x = x * 1.000001f + 0.5f;
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

static int alloc_until_refused(void) {
  const size_t block = 64ull << 20;
  size_t total = 0;
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < 1 << 16; ++i) {
    void *p = NULL;
    err = cudaMalloc(&p, block);
    if (err != cudaSuccess) break;
    total += block;
  }
  printf("allocated %zu error %d %s\n", total, (int)err, cudaGetErrorName(err));
  return 0;
}

static int compute_for(double seconds) {
  const int blocks = 1024, threads = 256;
  float *out = NULL;
  if (cudaMalloc(&out, sizeof(float) * blocks * threads) != cudaSuccess) return 2;
  burn<<<blocks, threads>>>(out, 2000);  // warm-up
  cudaDeviceSynchronize();
  long kernels = 0;
  double start = now_seconds(), elapsed = 0;
  while (elapsed < seconds) {
    burn<<<blocks, threads>>>(out, 2000);
    cudaDeviceSynchronize();
    ++kernels;
    elapsed = now_seconds() - start;
  }
  printf("kernels %ld seconds %.3f\n", kernels, elapsed);
  return cudaGetLastError() == cudaSuccess ? 0 : 3;
}

static int hold(size_t mib) {
  void *p = NULL;
  cudaError_t err = cudaMalloc(&p, mib << 20);
  if (err != cudaSuccess) {
    printf("error %s\n", cudaGetErrorName(err));
    return 2;
  }
  cudaMemset(p, 0, mib << 20);
  cudaDeviceSynchronize();
  printf("holding\n");
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof line, stdin) == NULL) return 0;
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 2 && strcmp(argv[1], "alloc") == 0) return alloc_until_refused();
  if (argc >= 3 && strcmp(argv[1], "compute") == 0) return compute_for(atof(argv[2]));
  if (argc >= 3 && strcmp(argv[1], "hold") == 0) return hold(strtoull(argv[2], NULL, 10));
  fprintf(stderr, "usage: probe alloc | compute <seconds> | hold <MiB>\n");
  return 64;
}
