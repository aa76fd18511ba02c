// edgekit-run bench: time one .pte as runner.py does (same options, checks, input resolution,
// timing loop, result document and --serve protocol).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

#include "args.h"
#include "commands.h"
#include "errors.h"
#include "files.h"
#include "host_facts.h"
#include "inputs.h"
#include "manifest.h"
#include "npz.h"
#include "program.h"
#include "runtime_log.h"
#include "stats.h"
#include "text.h"
#include "watchdog.h"
#include "timing.h"

namespace edgekit {

namespace {

constexpr int64_t kMaxBlock = 1000000;     // the most calls one serve "run" command may ask for
constexpr size_t kMaxCommandBytes = 65536;  // a serve command line

struct BenchArgs {
  std::string model;
  int64_t threads = 0, warmup = 10, min_runs = 50, max_runs = 100000, batch = 1, seed = 0;
  double min_time = 1.0;
  std::vector<std::string> shapes;
  std::string input, json, mode = "local", format, samples_json;
  std::optional<std::string> target;
  bool serve = false, emulated = false;
};

ArgParser bench_parser() {
  ArgParser p("edgekit-run bench", {"model"});
  p.add({"--threads", true, false, {}, "N", "XNNPACK threads (default: all usable cores)"});
  p.add({"--warmup", true, false, {}, "N", "untimed runs after the first (default 10)"});
  p.add({"--min-runs", true, false, {}, "N", "at least this many timed runs (default 50)"});
  p.add({"--min-time", true, false, {}, "S", "and at least this many seconds of them (default 1)"});
  p.add({"--max-runs", true, false, {}, "N", "safety cap on timed runs (default 100000)"});
  p.add({"--batch", true, false, {}, "N", "size of dynamic axes (default 1)"});
  p.add({"--shape", true, true, {}, "NAME=DIMS", "input shape, e.g. input=1x1x8x8 (repeatable)"});
  p.add({"--input", true, false, {}, "FILE.npz", "input arrays by input name"});
  p.add({"--format", true, false, {backend().format}, backend().format, std::string("the model's format (only ") + backend().format + " here)"});
  p.add({"--json", true, false, {}, "PATH", "write the result here (default, or '-': stdout)"});
  p.add({"--serve", false, false, {}, "", "after loading, take JSON-line commands on stdin"});
  p.add({"--emulated", false, false, {}, "", "record that this host emulates the target"});
  p.add({"--mode", true, false, {"local", "remote", "emulated"}, "MODE", "how this run was started (default local)"});
  p.add({"--target", true, false, {}, "NAME", "target name to record in the result"});
  p.add({"--seed", true, false, {}, "N", "seed of the random inputs (default 0)"});
  add_timeout_option(p, kDefaultStepLimitS);
  p.add({"--samples-json", true, false, {}, "FILE", "write the timed calls' ns here (debugging)", true});
  return p;
}

BenchArgs parse_bench(const ParsedArgs& parsed) {
  BenchArgs a;
  a.model = parsed.positionals[0];
  a.threads = parsed.has("--threads") ? parse_int("--threads", parsed.last("--threads")) : usable_cores();
  if (parsed.has("--warmup")) a.warmup = parse_int("--warmup", parsed.last("--warmup"));
  if (parsed.has("--min-runs")) a.min_runs = parse_int("--min-runs", parsed.last("--min-runs"));
  if (parsed.has("--min-time")) a.min_time = parse_float("--min-time", parsed.last("--min-time"));
  if (parsed.has("--max-runs")) a.max_runs = parse_int("--max-runs", parsed.last("--max-runs"));
  if (parsed.has("--batch")) a.batch = parse_int("--batch", parsed.last("--batch"));
  if (parsed.has("--seed")) a.seed = parse_int("--seed", parsed.last("--seed"));
  if (parsed.has("--shape")) a.shapes = parsed.values.at("--shape");
  if (parsed.has("--input")) a.input = parsed.last("--input");
  if (parsed.has("--json")) a.json = parsed.last("--json");
  if (parsed.has("--mode")) a.mode = parsed.last("--mode");
  if (parsed.has("--format")) a.format = parsed.last("--format");
  if (parsed.has("--target")) a.target = parsed.last("--target");
  if (parsed.has("--samples-json")) a.samples_json = parsed.last("--samples-json");
  a.serve = parsed.has("--serve");
  a.emulated = parsed.has("--emulated");
  const std::pair<bool, std::string> checks[] = {
      {a.threads >= 1, format("--threads must be at least 1, got %lld", static_cast<long long>(a.threads))},
      {a.threads <= 1024, format("--threads must be at most 1024, got %lld", static_cast<long long>(a.threads))},
      {a.warmup >= 0, format("--warmup must be 0 or more, got %lld", static_cast<long long>(a.warmup))},
      {a.min_runs >= 1, format("--min-runs must be at least 1, got %lld", static_cast<long long>(a.min_runs))},
      {std::isfinite(a.min_time) && a.min_time >= 0,
       "--min-time must be 0 or more seconds, got " + py_str(Json(a.min_time))},
      {a.max_runs >= a.min_runs, format("--max-runs (%lld) must be at least --min-runs (%lld)",
                                        static_cast<long long>(a.max_runs), static_cast<long long>(a.min_runs))},
      {a.batch >= 1, format("--batch must be at least 1, got %lld", static_cast<long long>(a.batch))},
      {a.seed >= 0, format("--seed must be 0 or more, got %lld", static_cast<long long>(a.seed))},
      {!(a.serve && !a.json.empty()), "--serve and --json do not go together"},
      {!(!a.shapes.empty() && !a.input.empty()),
       "--shape and --input do not go together (the arrays carry their shapes)"},
  };
  for (const auto& check : checks) {
    if (!check.first) throw UsageError(check.second);
  }
  return a;
}

// One program loaded, its first call and warm-up done, ready for timed calls.
class Benchmark {
 public:
  explicit Benchmark(const BenchArgs& args) : a_(args) {
    std::string model = normalize_path(a_.model);
    if (!is_file(model)) throw UsageError("model file not found: " + model);
    ManifestEntry manifest = read_manifest_entry(model);
    notes_ = manifest.notes;
    std::string fmt = detect_format(model, manifest.entry, a_.format);
    model_info_ = model_info(model, fmt, manifest.entry);
    std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
    for (const auto& text : a_.shapes) {
      auto shape = parse_shape(text);
      for (const auto& s : shapes) {
        if (s.first == shape.first) throw UsageError("--shape names input " + py_repr(shape.first) + " twice");
      }
      shapes.push_back(shape);
    }
    std::unique_ptr<std::vector<NpzMember>> npz;
    if (!a_.input.empty()) {
      if (!is_file(a_.input)) throw UsageError("input file not found: " + a_.input);
      npz = std::make_unique<std::vector<NpzMember>>(read_npz(a_.input, "input file"));
    }

    const RuntimeSetup& setup = init_runtime(a_.threads);
    threads_ = setup.threads;
    rss_before_ = rss_mb();
    int64_t started = now_ns();
    model_ = std::make_unique<Model>(model);
    load_ms_ = (now_ns() - started) / 1e6;
    auto rss_loaded = rss_mb();
    if (rss_before_ && rss_loaded) load_growth_ = *rss_loaded - *rss_before_;

    ResolvedSpecs specs = resolve_specs(*model_, manifest.manifest);
    for (auto& n : specs.notes) notes_.push_back(n);
    input_source_ = npz ? "npz" : (!shapes.empty() ? "shape" : specs.source);
    MadeInputs made = make_inputs(specs.specs, shapes, npz.get(), a_.batch, static_cast<uint64_t>(a_.seed));
    for (auto& n : made.notes) notes_.push_back(n);
    batch_ = made.batch;
    input_shapes_ = Json::object();
    for (size_t i = 0; i < made.names.size(); ++i) {
      Json dims = Json::array();
      for (int64_t d : made.arrays[i].shape) dims.push(static_cast<long long>(d));
      input_shapes_.set(made.names[i], dims);
    }
    std::vector<const Array*> pointers;
    for (const auto& arr : made.arrays) pointers.push_back(&arr);
    model_->check_fits(made.names, pointers, true);
    model_->bind(std::move(made.arrays));

    clear_runtime_errors();
    try {
      started = now_ns();
      model_->call();
      first_run_ms_ = (now_ns() - started) / 1e6;
    } catch (const RunError& e) {
      throw RunError(std::string("the first inference failed: ") + e.what());
    }
    for (int64_t i = 0; i < a_.warmup; ++i) model_->call();
  }

  void run_plain() {
    count_mark(CountMark::kBegin);
    samples_ = timed_until([this] { model_->call(); }, a_.min_runs, a_.min_time, a_.max_runs);
    count_mark(CountMark::kEnd);
  }

  std::vector<int64_t> run_block(int64_t n, int64_t warm) {
    for (int64_t i = 0; i < warm; ++i) model_->call();
    std::vector<int64_t> block = timed_calls([this] { model_->call(); }, n);
    samples_.insert(samples_.end(), block.begin(), block.end());
    return block;
  }

  const std::vector<int64_t>& samples() const { return samples_; }
  double load_ms() const { return load_ms_; }
  double first_run_ms() const { return first_run_ms_; }
  const Json& input_shapes() const { return input_shapes_; }

  Json result() const {
    TimingSummary t = summarize_ns(samples_);
    std::vector<std::string> notes = notes_;
    bool reached = t.runs >= a_.min_runs && t.total_s >= a_.min_time;
    if (!reached && t.runs >= a_.max_runs) {
      notes.push_back(format("stopped at --max-runs %lld before reaching --min-time %s s",
                             static_cast<long long>(a_.max_runs), py_format(a_.min_time, "g").c_str()));
    }
    auto peak = peak_rss_mb();
    if (!peak || !rss_before_) notes.push_back("resident memory is not readable on this host; memory figures are 0");
    std::string mode = a_.emulated && a_.mode == "local" ? "emulated" : a_.mode;
    Json providers = Json::array();
    for (const auto& b : registered_backends()) providers.push(b);
    Json runtime = Json::object();
    runtime.set("name", backend().runtime_name);
    runtime.set("version", runtime_version());
    runtime.set("threads", threads_ > 0 ? Json(static_cast<long long>(threads_)) : Json());
    runtime.set("engine", Json());
    runtime.set("providers", providers);
    runtime.set("import_ms", 0.0);
    runtime.set("torch_imported", false);
    Json settings = Json::object();
    settings.set("warmup", static_cast<long long>(a_.warmup));
    settings.set("min_runs", static_cast<long long>(a_.min_runs));
    settings.set("min_time_s", a_.min_time);
    settings.set("max_runs", static_cast<long long>(a_.max_runs));
    settings.set("batch", static_cast<long long>(batch_));
    settings.set("seed", static_cast<long long>(a_.seed));
    settings.set("inputs", input_source_);
    settings.set("serve", a_.serve);
    Json timing = Json::object();
    timing.set("load", load_ms_);
    timing.set("first_run", first_run_ms_);
    timing.set("p50", t.p50);
    timing.set("p90", t.p90);
    timing.set("p95", t.p95);
    timing.set("p99", t.p99);
    timing.set("mean", t.mean);
    timing.set("std", t.std);
    timing.set("min", t.min);
    timing.set("max", t.max);
    timing.set("runs", static_cast<long long>(t.runs));
    timing.set("total_s", t.total_s);
    Json memory = Json::object();
    memory.set("peak_rss", peak ? *peak : 0.0);
    memory.set("rss_before_load", rss_before_ ? *rss_before_ : 0.0);
    memory.set("load_growth", load_growth_ ? *load_growth_ : 0.0);
    Json note_list = Json::array();
    for (const auto& n : notes) note_list.push(n);
    Json result = Json::object();
    result.set("model", model_info_);
    result.set("runtime", runtime);
    result.set("input_shapes", input_shapes_);
    result.set("settings", settings);
    result.set("timing", timing);
    result.set("throughput_per_s", t.total_s > 0 ? static_cast<double>(batch_) * static_cast<double>(t.runs) / t.total_s : 0.0);
    result.set("memory", memory);
    result.set("host", host_facts(a_.emulated, runtime_version()));
    result.set("mode", mode);
    result.set("target", a_.target ? Json(*a_.target) : Json());
    result.set("created", utc_now_iso());
    result.set("notes", note_list);
    return result;
  }

 private:
  const BenchArgs& a_;
  Json model_info_, input_shapes_;
  std::vector<std::string> notes_;
  std::unique_ptr<Model> model_;
  std::vector<int64_t> samples_;
  std::optional<double> rss_before_, load_growth_;
  double load_ms_ = 0, first_run_ms_ = 0;
  int64_t threads_ = -1, batch_ = 1;
  std::string input_source_;
};

Json document(const Json& result) {
  return Json::object()
      .set("schema", "edgekit.bench")
      .set("schema_version", 1)
      .set("results", Json::array().push(result));
}

void reply(const Json& obj) {
  if (!emit(obj.dump() + "\n")) throw RunError("stdout was closed while serving");
}

bool count_ok(const Json* value, int64_t low) {
  return value != nullptr && value->is_int() && value->as_int() >= low && value->as_int() <= kMaxBlock;
}

// One line of stdin (without its newline) into *line; false at end of input. A line longer than
// kMaxCommandBytes is read to its end and reported as *too_long.
bool read_line(std::string* line, bool* too_long) {
  line->clear();
  *too_long = false;
  bool any = false;
  int c;
  while ((c = std::fgetc(stdin)) != EOF) {
    any = true;
    if (c == '\n') return true;
    if (line->size() < kMaxCommandBytes) line->push_back(static_cast<char>(c));
    else *too_long = true;
  }
  return any;
}

int serve(Benchmark& bench) {
  settle();
  reply(Json::object()
            .set("event", "ready")
            .set("load_ms", bench.load_ms())
            .set("first_run_ms", bench.first_run_ms())
            .set("input_shapes", bench.input_shapes())
            .set("pid", static_cast<long long>(::getpid())));
  std::string line;
  bool too_long;
  while (read_line(&line, &too_long)) {
    if (too_long) {
      reply(Json::object().set("ok", false).set("error", format("command longer than %zu bytes; expected run or finish",
                                                                 kMaxCommandBytes)));
      continue;
    }
    std::string stripped = trim(line);
    if (stripped.empty()) continue;
    Json msg;
    const Json* cmd = nullptr;
    if (parse_flat_object(line, &msg)) cmd = msg.find("cmd");
    std::string name = cmd != nullptr && cmd->is_string() ? cmd->as_string() : "";
    if (name == "run") {
      const Json* n = msg.find("n");
      const Json* warm = msg.find("warm");
      Json zero(0);
      if (!count_ok(n, 1) || !count_ok(warm ? warm : &zero, 0)) {
        reply(Json::object().set("ok", false).set(
            "error", format("run needs an integer n within 1..%lld (and warm 0..%lld)", static_cast<long long>(kMaxBlock),
                            static_cast<long long>(kMaxBlock))));
        continue;
      }
      std::vector<int64_t> block = bench.run_block(n->as_int(), warm ? warm->as_int() : 0);
      double waited = settle();
      Json ns = Json::array();
      for (int64_t s : block) ns.push(static_cast<long long>(s));
      reply(Json::object().set("ok", true).set("ns", ns).set("settle_ms", waited < 0 ? Json() : Json(waited * 1e3)));
    } else if (name == "finish") {
      if (bench.samples().empty()) {
        reply(Json::object().set("ok", false).set("error", "no timed runs yet"));
        continue;
      }
      reply(Json::object().set("ok", true).set("result", bench.result()));
      return kExitOk;
    } else {
      reply(Json::object().set("ok", false).set(
          "error", "unknown command " + py_repr(head_chars(stripped, 80)) + "; expected run or finish"));
    }
  }
  return kExitOk;
}

}  // namespace

int bench_command(const std::vector<std::string>& argv) {
  ArgParser parser = bench_parser();
  ParsedArgs parsed = parser.parse(argv);
  if (parsed.help) {
    emit(parser.usage());
    return kExitOk;
  }
  apply_timeout_option(parsed, kDefaultStepLimitS);
  BenchArgs args = parse_bench(parsed);
  std::vector<std::string> inputs = {args.model};
  if (!args.input.empty()) inputs.push_back(args.input);
  if (!args.json.empty() && args.json != "-") refuse_overwrite(args.json, inputs, "--json");
  if (!args.samples_json.empty()) refuse_overwrite(args.samples_json, inputs, "--samples-json");
  Benchmark bench(args);
  if (args.serve) return serve(bench);
  bench.run_plain();
  Json doc = document(bench.result());
  std::string text = doc.dump(2, true) + "\n";
  if (!args.samples_json.empty()) {
    Json ns = Json::array();
    for (int64_t s : bench.samples()) ns.push(static_cast<long long>(s));
    write_file_atomic(args.samples_json, ns.dump() + "\n", true, "--samples-json");
  }
  if (!args.json.empty() && args.json != "-") {
    write_file_atomic(args.json, text, true, "--json");
  } else if (!emit(text)) {
    throw RunError("cannot write the result to stdout");
  }
  return kExitOk;
}

}  // namespace edgekit
