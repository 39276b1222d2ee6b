/* A tiny shared object for the ldcache tests: VALUE is set with -DVALUE=n so
   the test can tell which copy the dynamic loader opened. */
int value(void) { return VALUE; }
