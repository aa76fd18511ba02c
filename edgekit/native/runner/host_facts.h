// Memory and host facts, as edgekit/board/facts.py reports them (a missing fact is null, never an
// error).
#pragma once

#include <optional>
#include <string>

#include "json.h"

namespace edgekit {

std::optional<double> rss_mb();       // VmRSS of this process (MiB)
std::optional<double> peak_rss_mb();  // VmHWM: this address space's own high-water mark (MiB)
std::optional<double> available_mb(); // MemAvailable (MiB)
int usable_cores();                   // CPUs this process may run on
int logical_cores();
std::string machine();                // uname -m (under qemu-user: the emulated machine)

// host_facts(emulated) of runner.py, with "python": null and runtimes {<the backend's key>: version}.
Json host_facts(bool emulated, const std::string& runtime_version);

}  // namespace edgekit
