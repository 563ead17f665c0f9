/* Kept at its old path for tests that include "os.h" (the test hook mtp__os_inject_failure).
 * Layer: base. */
#include "base/os.h"
