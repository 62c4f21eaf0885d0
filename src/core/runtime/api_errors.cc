#include "core/runtime/api_errors.h"

#include <string>

#include "core/runtime/comm.h"

namespace braid {
namespace {

thread_local std::string t_last_error;

}  // namespace

braidResult_t Fail(braidComm* comm, const Status& st) {
  t_last_error = st.message();
  if (comm) comm->setLastError(st.message());
  return st.code();
}

braidResult_t Fail(const Status& st) {
  return Fail(nullptr, st);
}

const char* ThreadLastError() {
  return t_last_error.c_str();
}

}  // namespace braid
