// edgekit-run info: what a program asks of the runtime (methods, forward's inputs and outputs with
// their planned sizes, backends, planned memory), and what this runtime has (backends, kernels).
#include "args.h"
#include "commands.h"
#include "errors.h"
#include "files.h"
#include "host_facts.h"
#include "program.h"
#include "sha256.h"
#include "text.h"
#include "watchdog.h"

namespace edgekit {

namespace {

Json tensors(const std::vector<TensorMeta>& metas) {
  Json out = Json::array();
  for (size_t i = 0; i < metas.size(); ++i) {
    const TensorMeta& t = metas[i];
    Json entry = Json::object().set("index", static_cast<long long>(i)).set("tag", t.tag);
    if (t.is_tensor()) {
      Json sizes = Json::array();
      for (int64_t d : t.sizes) sizes.push(static_cast<long long>(d));
      entry.set("dtype", t.dtype_text()).set("sizes", sizes);
    }
    out.push(entry);
  }
  return out;
}

Json strings(const std::vector<std::string>& values) {
  Json out = Json::array();
  for (const auto& v : values) out.push(v);
  return out;
}

}  // namespace

int info_command(const std::vector<std::string>& argv) {
  ArgParser parser("edgekit-run info", {"model"});
  parser.add({"--threads", true, false, {}, "N", "XNNPACK threads (default 1)"});
  add_timeout_option(parser, kDefaultStepLimitS);
  ParsedArgs parsed = parser.parse(argv);
  if (parsed.help) {
    emit(parser.usage());
    return kExitOk;
  }
  apply_timeout_option(parsed, kDefaultStepLimitS);
  std::string path = normalize_path(parsed.positionals[0]);
  int64_t threads = parsed.has("--threads") ? parse_int("--threads", parsed.last("--threads")) : 1;
  if (threads < 1 || threads > 1024) {
    throw UsageError(format("--threads must be within 1..1024, got %lld", static_cast<long long>(threads)));
  }
  if (!is_file(path)) throw UsageError("model file not found: " + path);
  const RuntimeSetup& setup = init_runtime(threads);
  Model model(path, false);  // the program and its plan; the method is not loaded (no kernels needed)
  long long planned = 0;
  Json buffers = Json::array();
  for (int64_t b : model.planned_buffers()) {
    planned += b;
    buffers.push(static_cast<long long>(b));
  }
  Json doc = Json::object()
                 .set("schema", "edgekit.native-info")
                 .set("runner_version", EDGEKIT_RUN_VERSION)
                 .set(std::string(backend().runtime_key) + "_version", runtime_version())
                 .set("runtime", Json::object().set("name", backend().runtime_name).set("version", runtime_version()))
                 .set("format", backend().format)
                 .set("model", Json::object().set("path", path).set("bytes", static_cast<long long>(file_size(path)))
                                   .set("sha256", sha256_file(path)))
                 .set("methods", strings(model.method_names()))
                 .set("inputs", tensors(model.inputs()))
                 .set("outputs", tensors(model.outputs()))
                 .set("backends", strings(model.backends_used()))
                 .set("registered_backends", strings(registered_backends()))
                 .set("kernels", strings(setup.kernels))
                 .set("registered_operators", static_cast<long long>(registered_operator_count()))
                 .set("planned_memory_bytes", planned)
                 .set("planned_buffers", buffers)
                 .set("batch_bound", static_cast<long long>(model.batch_bound()))
                 .set("threads", setup.threads > 0 ? Json(static_cast<long long>(setup.threads)) : Json())
                 .set("machine", machine());
  emit(doc.dump(2, true) + "\n");
  return kExitOk;
}

}  // namespace edgekit
