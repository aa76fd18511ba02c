// edgekit-run: run ExecuTorch .pte programs (or, built with the ONNX Runtime backend, .onnx models)
// with no Python on the board.
//
//   edgekit-run bench MODEL.pte [options]   time it (runner.py's options, result and --serve protocol)
//   edgekit-run check [options]             a bundle's output check (check_outputs.py's document)
//   edgekit-run probe MODEL REF.npz OUT.npz the outputs on a reference's inputs (probe.py)
//   edgekit-run info MODEL.pte              methods, inputs/outputs, backends, planned memory
//   edgekit-run generate MODEL.pte [options] greedy token ids from a language-model program
//
// Errors are one line "Error: ..." on stderr: exit 2 for a usage error or a bad input file, 1 for
// a model that failed to load or run (or a failed check), 0 ok.
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>

#include "commands.h"
#include "errors.h"
#include "files.h"
#include "runtime_log.h"
#include "text.h"
#include "watchdog.h"

namespace edgekit {

namespace {

const char* kHelpHead =
    "usage: edgekit-run COMMAND ...\n"
    "\n"
    "Run ";  // the backend's label
const char* kHelp =
    " models without Python (edgekit's native runner).\n"
    "\n"
    "commands:\n"
    "  bench MODEL.pte [options]    time the program (as runner.py; --serve for the\n"
    "                               JSON-lines protocol)\n"
    "  check [--model F] [options]  compare its outputs with reference.npz (as\n"
    "                               check_outputs.py; default: bundle.json here)\n"
    "  probe MODEL REF.npz OUT.npz  write its outputs on REF's inputs to OUT.npz\n"
    "  info MODEL.pte               methods, inputs, backends, planned memory\n"
    "  generate MODEL.pte --prompt-ids IDS --context N\n"
    "                               greedy token ids from a language-model program\n"
    "\n"
    "  edgekit-run COMMAND --help   the options of a command\n"
    "  edgekit-run --version        versions of edgekit-run and its runtime\n"
    "\n"
    "Exit status: 0 ok, 1 the model failed (or the check did), 2 usage error.\n"
    "EDGEKIT_DEBUG=1 shows the runtime's log on stderr.\n";

int stderr_fd = 2;

void on_interrupt(int) {
  static const char message[] = "Error: interrupted\n";
  ssize_t ignored = ::write(stderr_fd, message, sizeof message - 1);
  (void)ignored;
  ::_exit(130);
}

int fail(const std::string& message, int code) {
  std::fprintf(err_stream(), "Error: %s\n", one_line(message, 2000).c_str());
  std::fflush(err_stream());
  if (debug_enabled()) {
    for (const auto& line : runtime_log()) std::fprintf(err_stream(), "  runtime: %s\n", line.c_str());
  }
  return code;
}

int dispatch(const std::vector<std::string>& args) {
  if (args.empty()) throw UsageError("a command is required (bench, check, probe, info or generate); see edgekit-run --help");
  const std::string& command = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (command == "-h" || command == "--help" || command == "help") {
    emit(std::string(kHelpHead) + backend().label + kHelp);
    return kExitOk;
  }
  if (command == "--version" || command == "-V") {
    emit(std::string("edgekit-run ") + EDGEKIT_RUN_VERSION + " (" + backend().label + " " + runtime_version() + ")\n");
    return kExitOk;
  }
  if (command == "bench") return bench_command(rest);
  if (command == "check") return check_command(rest);
  if (command == "probe") return probe_command(rest);
  if (command == "info") return info_command(rest);
  if (command == "generate") return generate_command(rest);
  throw UsageError("unknown command " + py_repr(head_chars(command, 80)) + "; expected bench, check, probe, info or generate");
}

}  // namespace

bool emit(const std::string& text) {
  FILE* out = out_stream();
  bool ok = std::fwrite(text.data(), 1, text.size(), out) == text.size();
  return std::fflush(out) == 0 && ok;
}

std::string utc_now_iso() {
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S+00:00", &utc);
  return buf;
}

void refuse_overwrite(const std::string& out, const std::vector<std::string>& inputs, const std::string& option) {
  check_output_path(out, option);
  for (const auto& input : inputs) {
    if (!input.empty() && (same_file(out, input) || resolve_path(out) == resolve_path(input))) {
      throw UsageError(option + " " + out + " is one of the command's inputs (" + input + "); choose another file");
    }
  }
}

}  // namespace edgekit

int main(int argc, char** argv) {
  using namespace edgekit;
  ::signal(SIGPIPE, SIG_IGN);  // a closed pipe is a failed write, not a death by signal
  protect_output();
  stderr_fd = ::fileno(err_stream());
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  ::sigaction(SIGINT, &action, nullptr);
  install_crash_handlers(stderr_fd);
  limit_memory();
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return dispatch(args);
  } catch (const UsageError& e) {
    return fail(e.what(), kExitUsage);
  } catch (const RunError& e) {
    return fail(e.what(), kExitFailed);
  } catch (const std::bad_alloc&) {
    return fail("out of memory", kExitFailed);
  } catch (const std::exception& e) {
    return fail(std::string("unexpected failure: ") + e.what(), kExitFailed);
  } catch (...) {
    return fail("unexpected failure (an exception of unknown type)", kExitFailed);
  }
}
