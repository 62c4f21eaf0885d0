// Logging: quiet by default. BRAID_DEBUG=WARN|INFO|TRACE (or NCCL_DEBUG) raises the level;
// BRAID_DEBUG_FILE=path.%r writes one file per rank (%r = rank, %p = pid).
#pragma once

#include <cstdarg>

namespace braid {

enum class LogLevel : int { kNone = 0, kWarn = 1, kInfo = 2, kTrace = 3 };

LogLevel CurrentLogLevel();
// Sets the rank shown in the prefix of this process's lines (the last initialised comm wins).
void SetLogRank(int rank);
void LogMessage(LogLevel level, const char* file, int line, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));

}  // namespace braid

#define BRAID_LOG(level, ...)                                                    \
  do {                                                                           \
    if (static_cast<int>(::braid::CurrentLogLevel()) >= static_cast<int>(level)) \
      ::braid::LogMessage(level, __FILE__, __LINE__, __VA_ARGS__);               \
  } while (0)
#define BRAID_WARN(...) BRAID_LOG(::braid::LogLevel::kWarn, __VA_ARGS__)
#define BRAID_INFO(...) BRAID_LOG(::braid::LogLevel::kInfo, __VA_ARGS__)
#define BRAID_TRACE(...) BRAID_LOG(::braid::LogLevel::kTrace, __VA_ARGS__)
