// libcmalloc gives a process glibc's malloc in place of the jemalloc it is
// linked with. Preloaded before libfaketime, it lets libfaketime into
// Debian's redis-server: jemalloc reads the clock while it starts, which
// libfaketime, not yet started itself, refuses ("Unexpected recursive
// calls to clock_gettime()"). Redis still calls jemalloc's mallctl for its
// statistics; jemalloc then starts with libfaketime running.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
void *calloc(size_t n, size_t m) { return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return __libc_memalign(a, n); }
void *valloc(size_t n) { return __libc_memalign(4096, n); }

int posix_memalign(void **out, size_t a, size_t n) {
	void *p = __libc_memalign(a, n);
	if (p == NULL)
		return ENOMEM;
	*out = p;
	return 0;
}

// glibc exports no __libc_ name for it: its own, looked up in libc.
static size_t (*libc_usable_size)(void *);

size_t malloc_usable_size(void *p) {
	if (libc_usable_size == NULL)
		libc_usable_size = (size_t (*)(void *))dlsym(dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD), "malloc_usable_size");
	return libc_usable_size(p);
}
