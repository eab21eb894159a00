/* A stand-in libcuda.so.1 for tests/unit/test_cold_start.py and test_launch_functions.py: every
 * entry point mmaplug's driver module and cuda.bindings call on the bind-and-launch path, answering
 * like one idle H200 (cc 9.0, 132 SMs), Numba's driver initialisation included. Nothing runs.
 * Contexts follow the driver's rules as far as launches see them: the current context is per
 * thread; a stream belongs to the context current when it was created (a handle it never made
 * belongs to the primary context 0x1234); handles 0, 1 and 2 mean the current context's default
 * stream. A CUfunction (cuKernelGetFunction) is its kernel in one context and launches only on
 * that context's streams (else 400, CUDA_ERROR_INVALID_HANDLE); a CUkernel launches anywhere.
 * Launches are counted (atomically: launches from several threads run at once, without the GIL):
 * all (stub_launches), through a CUfunction, in clusters. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <string.h>
#include <stdio.h>
typedef int CUresult;
#define PRIMARY ((void*)0x1234)
static __thread void* ctx = 0;  /* the calling thread's current context */
static long launches = 0, function_launches = 0, cluster_launches = 0;
static unsigned last_cluster = 0;
static struct { void* ctx; } streams[256];  /* handle 0x9000 + 16 i */
static int nstreams = 0;
static struct { void* kernel; void* ctx; int smem; } functions[256];  /* handle 0xF00000 + 16 i */
static int nfunctions = 0;
static int function_index(void* f){
  long i = ((long)f - 0xF00000) / 16;
  return ((long)f >= 0xF00000 && ((long)f & 15) == 0 && i < nfunctions) ? (int)i : -1;}
static void* stream_ctx(void* s){
  long i = ((long)s - 0x9000) / 16;
  if((long)s <= 2) return ctx;
  if((long)s >= 0x9000 && ((long)s & 15) == 0 && i < nstreams) return streams[i].ctx;
  return PRIMARY;}
static CUresult launch(void* f, unsigned gx, void* stream){
  void* c = stream_ctx(stream); int i = function_index(f);
  if(!gx) return 1;  /* CUDA_ERROR_INVALID_VALUE, as for an empty grid */
  if(!c) return 201;
  if(i >= 0){ if(functions[i].ctx != c) return 400; __atomic_add_fetch(&function_launches, 1, __ATOMIC_RELAXED); }
  __atomic_add_fetch(&launches, 1, __ATOMIC_RELAXED); return 0;}
CUresult cuInit(unsigned f){return 0;}
CUresult cuDriverGetVersion(int* v){*v=13000;return 0;}
CUresult cuGetErrorName(CUresult e, const char** s){*s = e==201?"CUDA_ERROR_INVALID_CONTEXT":"CUDA_ERROR_STUB";return 0;}
CUresult cuCtxGetCurrent(void** c){*c=ctx;return 0;}
CUresult cuCtxSetCurrent(void* c){ctx=c;return 0;}
CUresult cuCtxGetDevice(int* d){*d=0;return 0;}
CUresult cuDevicePrimaryCtxRetain(void** c, int d){*c=PRIMARY;return 0;}
CUresult cuDeviceGetAttribute(int* v, int a, int d){
  switch(a){case 75:*v=9;break;case 76:*v=0;break;case 16:*v=132;break;case 1:*v=1024;break;case 10:*v=32;break;
  case 8:*v=49152;break;case 97:*v=232448;break;case 81:*v=233472;break;case 82:*v=65536;break;
  case 39:*v=2048;break;case 106:*v=32;break;case 38:*v=52428800;break;default:*v=0;}
  return 0;}
CUresult cuDeviceGetName(char* n, int len, int d){strncpy(n,"Stub H200",len);return 0;}
CUresult cuLibraryLoadData(void** lib, const void* code, void* a, void* b, unsigned n, void* c, void* d, unsigned m){static long nl=0x5000; *lib=(void*)(nl+=16);return 0;}
CUresult cuLibraryGetKernel(void** k, void* lib, const char* name){static long nk=0x6000; *k=(void*)(nk+=16);return 0;}
CUresult cuKernelSetAttribute(int attr, int val, void* k, int dev){return 0;}
CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned smem, void* stream, void** params, void** extra){
  return launch(f, gx, stream);}
typedef struct { unsigned id; unsigned pad; unsigned value[16]; } Attribute;  /* CUlaunchAttribute */
typedef struct { unsigned grid[3], block[3], smem; void* stream; Attribute* attrs; unsigned nattrs; } Config;
CUresult cuLaunchKernelEx(const Config* c, void* f, void** params, void** extra){
  CUresult e = launch(f, c->grid[0], c->stream); unsigned i;
  if(e) return e;
  for(i = 0; i < c->nattrs; i++)
    if(c->attrs[i].id == 4){ last_cluster = c->attrs[i].value[0]; __atomic_add_fetch(&cluster_launches, 1, __ATOMIC_RELAXED); }
  return 0;}
CUresult cuKernelGetFunction(void** f, void* k){
  int i;
  if(!ctx) return 201;
  for(i = 0; i < nfunctions; i++) if(functions[i].kernel == k && functions[i].ctx == ctx) break;
  if(i == nfunctions){ if(i == 256) return 2; functions[i].kernel = k; functions[i].ctx = ctx; functions[i].smem = 0; nfunctions++; }
  *f = (void*)(0xF00000 + 16L * i); return 0;}
CUresult cuFuncSetAttribute(void* f, int attr, int val){
  int i = function_index(f); if(i < 0) return 400; if(attr == 8) functions[i].smem = val; return 0;}
CUresult cuStreamGetCtx(void* s, void** c){*c = stream_ctx(s); return *c ? 0 : 201;}
long stub_launches(void){return launches;}
long stub_function_launches(void){return function_launches;}
long stub_cluster_launches(void){return cluster_launches;}
unsigned stub_last_cluster(void){return last_cluster;}
int stub_function_smem(void* f){int i = function_index(f); return i < 0 ? -1 : functions[i].smem;}
CUresult cuMemAlloc_v2(uint64_t* p, size_t n){*p=0x7000000;return 0;}
CUresult cuMemFree_v2(uint64_t p){return 0;}
CUresult cuMemcpyHtoDAsync_v2(uint64_t d, const void* h, size_t n, void* s){return 0;}
CUresult cuMemsetD32Async(uint64_t d, unsigned v, size_t n, void* s){return 0;}
CUresult cuStreamCreate(void** s, unsigned f){
  if(nstreams == 256) return 2;
  streams[nstreams].ctx = ctx ? ctx : PRIMARY; *s = (void*)(0x9000 + 16L * nstreams++); return 0;}
CUresult cuStreamSynchronize(void* s){return 0;}
CUresult cuStreamIsCapturing(void* s, int* st){*st=0;return 0;}
CUresult cuThreadExchangeStreamCaptureMode(int* m){*m=0;return 0;}
CUresult cuGetProcAddress_v2(const char* sym, void** pfn, int ver, uint64_t flags, int* status){
  *pfn = dlsym(RTLD_DEFAULT, sym); if(status)*status = *pfn?0:1; return *pfn?0:500;}
CUresult cuGetProcAddress(const char* sym, void** pfn, int ver, uint64_t flags){
  *pfn = dlsym(RTLD_DEFAULT, sym); return *pfn?0:500;}
CUresult cuTensorMapEncodeTiled(void* tmap, int dt, unsigned rank, void* addr, const uint64_t* dims, const uint64_t* strides, const unsigned* box, const unsigned* es, int il, int sw, int l2, int oob){memset(tmap,0,128);return 0;}
CUresult cuStreamGetCaptureInfo(void* s, int* st, uint64_t* id){*st=0;return 0;}
CUresult cuDeviceGetCount(int* n){*n=1;return 0;}
CUresult cuDeviceGet(int* d, int o){*d=o;return 0;}
CUresult cuDeviceGetUuid(char* u, int d){memset(u,1,16);return 0;}
CUresult cuDeviceGetUuid_v2(char* u, int d){memset(u,1,16);return 0;}
CUresult cuCtxPushCurrent(void* c){ctx=c;return 0;}
CUresult cuCtxPopCurrent(void** c){if(c)*c=ctx;return 0;}
CUresult cuDevicePrimaryCtxRelease(int d){return 0;}
CUresult cuDeviceComputeCapability(int* ma, int* mi, int d){*ma=9;*mi=0;return 0;}
CUresult cuMemGetInfo(size_t* f, size_t* t){*f=1<<30;*t=1<<30;return 0;}
CUresult cuCtxSynchronize(void){return 0;}
CUresult cuDeviceGetPCIBusId(char* s, int len, int d){strncpy(s,"0000:00:00.0",len);return 0;}
CUresult cuCtxGetApiVersion(void* c, unsigned* v){*v=13000;return 0;}
CUresult cuKernelGetAttribute(int* v, int a, void* k, int d){*v=0;return 0;}
CUresult cuFuncGetAttribute(int* v, int a, void* f){*v=0;return 0;}
CUresult cuLibraryUnload(void* l){return 0;}
CUresult cuKernelGetName(const char** n, void* k){*n="k";return 0;}
CUresult cuLibraryGetModule(void** m, void* l){*m=l;return 0;}
CUresult cuModuleGetGlobal_v2(uint64_t* p, size_t* s, void* m, const char* n){*p=0;*s=0;return 500;}
