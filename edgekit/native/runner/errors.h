// The two kinds of failure a command ends with, and their exit codes.
//
// Every error is one line on stderr ("Error: ..."): UsageError for a wrong command line or a
// bad input file (exit 2), RunError for a model that would not load or run (exit 1).
#pragma once

#include <stdexcept>
#include <string>

namespace edgekit {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct UsageError : std::runtime_error {
  explicit UsageError(const std::string& what) : std::runtime_error(what) {}
};

struct RunError : std::runtime_error {
  explicit RunError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace edgekit
