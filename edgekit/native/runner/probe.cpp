// edgekit-run probe: run a program on a reference.npz's inputs and write its outputs (float32)
// into an .npz, as probe.py does: b{batch}/output (output 0), b{batch}/outputs/{k} (output k >= 1).
#include "args.h"
#include "commands.h"
#include "errors.h"
#include "files.h"
#include "host_facts.h"
#include "inputs.h"
#include "manifest.h"
#include "npz.h"
#include "program.h"
#include "reference.h"
#include "text.h"
#include "watchdog.h"

namespace edgekit {

int probe_command(const std::vector<std::string>& argv) {
  ArgParser parser("edgekit-run probe", {"model", "reference", "out"});
  parser.add({"--format", true, false, {backend().format}, backend().format, std::string("the model's format (only ") + backend().format + " here)"});
  parser.add({"--threads", true, false, {}, "N", "XNNPACK threads (default 1)"});
  parser.add({"--inputs", true, false, {}, "NAME,NAME", "input names in call order"});
  add_timeout_option(parser, kDefaultStepLimitS);
  ParsedArgs parsed = parser.parse(argv);
  if (parsed.help) {
    emit(parser.usage());
    return kExitOk;
  }
  apply_timeout_option(parsed, kDefaultStepLimitS);
  std::string model = parsed.positionals[0], reference = parsed.positionals[1], out = parsed.positionals[2];
  int64_t threads = parsed.has("--threads") ? parse_int("--threads", parsed.last("--threads")) : 1;
  if (threads < 1) throw UsageError(format("--threads must be at least 1, got %lld", static_cast<long long>(threads)));
  if (threads > 1024) throw UsageError(format("--threads must be at most 1024, got %lld", static_cast<long long>(threads)));
  std::vector<std::string> order;
  if (parsed.has("--inputs")) {
    for (const auto& name : split(parsed.last("--inputs"), ',')) {
      if (!name.empty()) order.push_back(name);
    }
  }
  if (!is_file(model)) throw UsageError("model file not found: " + model);
  detect_format(model, Json(), parsed.has("--format") ? parsed.last("--format") : "");
  refuse_overwrite(out, {model, reference}, "OUT");
  std::vector<ReferenceCase> cases = read_reference(reference, false);
  const RuntimeSetup& setup = init_runtime(threads);
  Model program(model);
  std::vector<NpzMember> outputs;
  Json batches = Json::array();
  for (const auto& c : cases) {
    std::vector<std::string> names;
    for (const auto& n : order) {
      for (const auto& input : c.inputs) {
        if (input.first == n) names.push_back(n);
      }
    }
    if (names.empty()) {
      for (const auto& input : c.inputs) names.push_back(input.first);
    }
    std::vector<const Array*> arrays;
    for (const auto& n : names) {
      for (const auto& input : c.inputs) {
        if (input.first == n) arrays.push_back(&input.second);
      }
    }
    std::vector<Array> got;
    try {
      got = program.predict_all(arrays);
    } catch (const RunError& e) {
      throw RunError(format("inference at batch %lld failed: ", static_cast<long long>(c.batch)) + e.what());
    }
    for (size_t k = 0; k < got.size(); ++k) {
      std::string key = k == 0 ? format("b%lld/output", static_cast<long long>(c.batch))
                               : format("b%lld/outputs/%zu", static_cast<long long>(c.batch), k);
      outputs.push_back({key, std::move(got[k])});
    }
    batches.push(static_cast<long long>(c.batch));
  }
  write_file_atomic(out, write_npz(outputs), false, "OUT");
  Json providers = Json::array();
  for (const auto& b : registered_backends()) providers.push(b);
  Json runtime = Json::object()
                     .set("name", backend().runtime_name)
                     .set("version", runtime_version())
                     .set("threads", setup.threads > 0 ? Json(static_cast<long long>(setup.threads)) : Json())
                     .set("engine", Json())
                     .set("providers", providers);
  Json info = Json::object()
                  .set("machine", machine())
                  .set("python", Json())
                  .set("numpy", Json())
                  .set("runtime", runtime)
                  .set("format", backend().format)
                  .set("threads", static_cast<long long>(threads))
                  .set("batches", batches);
  emit(info.dump() + "\n");
  return kExitOk;
}

}  // namespace edgekit
