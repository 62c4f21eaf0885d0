// Whether this test binary runs under AddressSanitizer, for GCC (__SANITIZE_ADDRESS__) and clang
// (__has_feature(address_sanitizer)): the sanitizer pass builds with either. Tests skip what ASan
// makes impossible (an address-space limit, a fork while its allocator's lock may be held) or
// meaningless (resident-memory growth, with its quarantine).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define BRAID_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BRAID_TEST_UNDER_ASAN 1
#endif
#endif
#ifndef BRAID_TEST_UNDER_ASAN
#define BRAID_TEST_UNDER_ASAN 0
#endif
