/* dlopen()s every soname given on the command line (so resolution goes
   through /etc/ld.so.cache) and prints "OK <name> <value>" or
   "FAIL <name> <reason>" for each. Exits 0 only if all were found. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
  int failed = 0;
  for (int i = 1; i < argc; i++) {
    void *h = dlopen(argv[i], RTLD_NOW);
    if (h == NULL) {
      printf("FAIL %s %s\n", argv[i], dlerror());
      failed = 1;
      continue;
    }
    int (*value)(void) = (int (*)(void))dlsym(h, "value");
    if (value == NULL) {
      printf("FAIL %s no symbol\n", argv[i]);
      failed = 1;
      continue;
    }
    printf("OK %s %d\n", argv[i], value());
  }
  return failed;
}
