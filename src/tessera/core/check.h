// Checks that turn a false condition into a typed Tessera error.
//
//   TS_CHECK(cond, "message parts", value, ...)            -> tessera::Error
//   TS_CHECK_T(ConfigError, cond, "message parts", ...)    -> the named error type
//   TS_CHECK_EQ(a, b, "context", ...) and _NE/_LT/_LE/_GT/_GE: print both values
//   TS_THROW(CommError, "message parts", ...)              -> always throws
//   TS_INTERNAL_ASSERT(cond, ...)                          -> a bug in Tessera itself
//
// Message parts are concatenated with c10::str (anything with operator<<).
// Use TS_CHECK for user or input errors; the message should say what to do.
#pragma once

#include <c10/util/StringUtil.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/error.h"

#define TS_THROW(ErrorType, ...) throw ::tessera::ErrorType(::c10::str(__VA_ARGS__))

#define TS_CHECK_T(ErrorType, cond, ...)  \
  do {                                    \
    if (C10_UNLIKELY(!(cond))) {          \
      TS_THROW(ErrorType, __VA_ARGS__);   \
    }                                     \
  } while (0)

#define TS_CHECK(cond, ...) TS_CHECK_T(Error, cond, __VA_ARGS__)

#define TS_CHECK_OP_(a, b, op, ...)                                                    \
  do {                                                                                 \
    const auto& ts_a_ = (a);                                                           \
    const auto& ts_b_ = (b);                                                           \
    if (C10_UNLIKELY(!(ts_a_ op ts_b_))) {                                             \
      TS_THROW(Error, "expected " #a " " #op " " #b " (", ts_a_, " vs ", ts_b_, ")",   \
               ::c10::str(" " __VA_ARGS__));                                           \
    }                                                                                  \
  } while (0)

#define TS_CHECK_EQ(a, b, ...) TS_CHECK_OP_(a, b, ==, ##__VA_ARGS__)
#define TS_CHECK_NE(a, b, ...) TS_CHECK_OP_(a, b, !=, ##__VA_ARGS__)
#define TS_CHECK_LT(a, b, ...) TS_CHECK_OP_(a, b, <, ##__VA_ARGS__)
#define TS_CHECK_LE(a, b, ...) TS_CHECK_OP_(a, b, <=, ##__VA_ARGS__)
#define TS_CHECK_GT(a, b, ...) TS_CHECK_OP_(a, b, >, ##__VA_ARGS__)
#define TS_CHECK_GE(a, b, ...) TS_CHECK_OP_(a, b, >=, ##__VA_ARGS__)

#define TS_INTERNAL_ASSERT(cond, ...)                                                   \
  TS_CHECK_T(Error, cond, "internal error in Tessera (please report): " #cond " at ", \
             __FILE__, ":", __LINE__, " ", ##__VA_ARGS__)

// Converts a failing POSIX call (returns -1 and sets errno) into the given error,
// naming the call and strerror(errno).
#define TS_CHECK_ERRNO(ErrorType, expr, ...)                                           \
  do {                                                                                 \
    if (C10_UNLIKELY((expr) == -1)) {                                                  \
      int ts_errno_ = errno;                                                           \
      TS_THROW(ErrorType, __VA_ARGS__, ": " #expr " failed: ", ::std::strerror(ts_errno_)); \
    }                                                                                  \
  } while (0)
