// The subcommands of edgekit-run, and what they share: the versions, writing our own output.
#pragma once

#include <string>
#include <vector>

#include "backend.h"
#include "json.h"

#ifndef EDGEKIT_RUN_VERSION
#define EDGEKIT_RUN_VERSION "0.0.0"
#endif

namespace edgekit {

int bench_command(const std::vector<std::string>& argv);
int check_command(const std::vector<std::string>& argv);
int probe_command(const std::vector<std::string>& argv);
int info_command(const std::vector<std::string>& argv);
int generate_command(const std::vector<std::string>& argv);

// Our output on the original stdout (flushed); false when it cannot be written (a closed pipe).
bool emit(const std::string& text);
// UTC now as Python's datetime.now(timezone.utc).isoformat(timespec="seconds").
std::string utc_now_iso();
// UsageError unless `out` is none of `inputs` (a command never writes over what it reads).
void refuse_overwrite(const std::string& out, const std::vector<std::string>& inputs, const std::string& option);

}  // namespace edgekit
