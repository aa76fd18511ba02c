// ExecuTorch's log sink (weak in libexecutorch.so), overridden so its lines land in the runtime log.
#include <cstdio>
#include <string>

#include <executorch/runtime/platform/platform.h>

#include "runtime_log.h"

// Keep the lines; show them only when debugging.
extern "C" void et_pal_emit_log_message(et_timestamp_t /*timestamp*/, et_pal_log_level_t level, const char* filename,
                                        const char* /*function*/, size_t line, const char* message, size_t length) {
  std::string text(message ? message : "", message ? length : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  bool is_error = level == kError || level == kFatal;
  if (edgekit::debug_enabled()) {
    const char* base = filename ? filename : "?";
    for (const char* p = base; *p; ++p) {
      if (*p == '/') base = p + 1;
    }
    std::fprintf(edgekit::err_stream(), "[%c %s:%zu] %s\n", static_cast<char>(level), base, line, text.c_str());
  }
  edgekit::log_runtime_line(text, is_error);
}
