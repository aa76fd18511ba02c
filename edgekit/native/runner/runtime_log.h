// What the runtime says: its log (ExecuTorch's through executorch_log.cpp, ONNX Runtime's through its logger)
// and anything its libraries write on file descriptors 1 and 2, collected in memory. Shown on
// stderr only with EDGEKIT_DEBUG; the first error line goes into one-line messages.
//
// stdout carries only edgekit-run's own output: the runtime's fd 1 and fd 2 point at a sink (or,
// with EDGEKIT_DEBUG, fd 1 at stderr) and our output goes through duplicates of the originals.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace edgekit {

// Redirects fd 1 and fd 2 (once, at start).
void protect_output();
FILE* out_stream();  // the original stdout
FILE* err_stream();  // the original stderr

bool debug_enabled();  // EDGEKIT_DEBUG is set

// Keeps one line the runtime logged (shown with EDGEKIT_DEBUG; the first error goes into messages).
void log_runtime_line(const std::string& line, bool is_error);
// The runtime's log so far (ExecuTorch's lines, then what was written on fd 1/2), bounded.
std::vector<std::string> runtime_log();
// " (runtime: FIRST ERROR LINE)", or "" when the runtime logged no error.
std::string runtime_detail();
// Forget the errors logged so far (the detail of a later failure is its own).
void clear_runtime_errors();

}  // namespace edgekit
