// The last line of defence against a damaged program: ExecuTorch can loop for ever or abort()
// inside its own code, where no exception reaches main(). A timer bounds each load and each run
// of the program, and fatal signals end the process with one "Error: ..." line, not a core dump.
#pragma once

#include <string>

#include "args.h"

namespace edgekit {

constexpr double kDefaultStepLimitS = 30;  // one load or one run of a program on a small board
constexpr double kGenerateStepLimitS = 300;  // a language model's prompt in one run, emulated
constexpr double kMaxStepLimitS = 7 * 24 * 3600;

// SIGABRT, SIGSEGV, SIGBUS, SIGFPE and SIGILL write one Error line on fd and exit 1.
void install_crash_handlers(int fd);

// Caps the process's data (RLIMIT_DATA) at the memory this machine can give it now (MemAvailable
// plus free swap): a damaged program that asks for ever more memory gets a failed allocation (one
// Error line) instead of growing until the kernel's OOM killer picks a process to kill.
void limit_memory();

// --timeout S: the limit on loading the program and on each run of it (0: none).
void add_timeout_option(ArgParser& parser, double default_s);
// Reads --timeout (UsageError for a bad value) and makes it the limit the StepTimers use.
void apply_timeout_option(const ParsedArgs& parsed, double default_s);

// While alive, `what` ("loading model.pte") names the step in a crash line, and the step is
// ended with "Error: ... did not finish within N s" (exit 1) when it outlives the limit.
class StepTimer {
 public:
  explicit StepTimer(const std::string& what);
  ~StepTimer();
  StepTimer(const StepTimer&) = delete;
  StepTimer& operator=(const StepTimer&) = delete;

 private:
  bool armed_ = false;
};

}  // namespace edgekit
