// The command-line parser (see args.h).
#include "args.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "errors.h"
#include "text.h"

namespace edgekit {

namespace {

// argparse's test for a value that looks like a negative number ("-1", "-.5", "-2.0").
bool negative_number(const std::string& text) {
  if (text.size() < 2 || text[0] != '-') return false;
  size_t i = 1, digits_before = 0, digits_after = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) { ++i; ++digits_before; }
  if (i == text.size()) return digits_before > 0;
  if (text[i] != '.') return false;
  ++i;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) { ++i; ++digits_after; }
  return i == text.size() && digits_after > 0;
}

// Python's int() of text: surrounding whitespace, a sign, digits with single underscores between.
bool python_int(const std::string& raw, int64_t* out) {
  std::string text = trim(raw);
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  std::string digits;
  bool last_underscore = true;  // no leading underscore
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c == '_' && !last_underscore) { last_underscore = true; continue; }
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    digits += c;
    last_underscore = false;
  }
  if (digits.empty() || last_underscore) return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(((negative ? "-" : "") + digits).c_str(), &end, 10);
  if (errno == ERANGE) return false;  // past int64: refused rather than wrapped
  *out = v;
  return true;
}

}  // namespace

int64_t parse_int(const std::string& option, const std::string& text) {
  int64_t v;
  if (!python_int(text, &v)) throw UsageError("argument " + option + ": invalid int value: " + py_repr(text));
  return v;
}

double parse_float(const std::string& option, const std::string& text) {
  std::string t = trim(text);
  std::string lower;
  for (char c : t) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  bool hex = lower.find('x') != std::string::npos;
  char* end = nullptr;
  double v = t.empty() || hex ? 0.0 : std::strtod(t.c_str(), &end);
  if (t.empty() || hex || end != t.c_str() + t.size()) {
    throw UsageError("argument " + option + ": invalid float value: " + py_repr(text));
  }
  return v;
}

const Option* ArgParser::lookup(const std::string& name) const {
  for (const auto& o : options_) {
    if (o.name == name) return &o;
  }
  std::vector<const Option*> matches;
  for (const auto& o : options_) {
    if (starts_with(o.name, name)) matches.push_back(&o);
  }
  if (matches.size() == 1) return matches[0];
  if (matches.size() > 1) {
    std::vector<std::string> names;
    for (const auto* o : matches) names.push_back(o->name);
    throw UsageError("ambiguous option: " + name + " could match " + join(names, ", "));
  }
  return nullptr;
}

ParsedArgs ArgParser::parse(const std::vector<std::string>& argv) const {
  ParsedArgs out;
  std::vector<std::string> extras;
  bool only_positionals = false;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (only_positionals || arg.size() < 2 || arg[0] != '-' || negative_number(arg)) {
      if (out.positionals.size() < positionals_.size()) out.positionals.push_back(arg);
      else extras.push_back(arg);
      continue;
    }
    if (arg == "--") {
      only_positionals = true;
      continue;
    }
    if (arg == "-h" || arg == "--help") {
      out.help = true;
      continue;
    }
    std::string name = arg, value;
    bool inline_value = false;
    size_t eq = arg.find('=');
    if (starts_with(arg, "--") && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    const Option* option = starts_with(name, "--") ? lookup(name) : nullptr;
    if (option == nullptr) {
      extras.push_back(arg);
      continue;
    }
    if (!option->takes_value) {
      if (inline_value) throw UsageError("argument " + option->name + ": ignored explicit argument " + py_repr(value));
      out.values[option->name] = {""};
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argv.size() || (argv[i + 1].size() > 1 && argv[i + 1][0] == '-' && !negative_number(argv[i + 1]))) {
        throw UsageError("argument " + option->name + ": expected one argument");
      }
      value = argv[++i];
    }
    if (!option->choices.empty()) {
      bool ok = false;
      for (const auto& c : option->choices) ok = ok || c == value;
      if (!ok) {
        std::vector<std::string> shown;
        for (const auto& c : option->choices) shown.push_back(py_repr(c));
        throw UsageError("argument " + option->name + ": invalid choice: " + py_repr(value) + " (choose from " +
                         join(shown, ", ") + ")");
      }
    }
    auto& slot = out.values[option->name];
    if (option->repeatable) slot.push_back(value);
    else slot = {value};
  }
  if (out.help) return out;
  if (out.positionals.size() < positionals_.size()) {
    std::vector<std::string> missing(positionals_.begin() + static_cast<long>(out.positionals.size()), positionals_.end());
    throw UsageError("the following arguments are required: " + join(missing, ", "));
  }
  if (!extras.empty()) throw UsageError("unrecognized arguments: " + join(extras, " "));
  return out;
}

std::string ArgParser::usage() const {
  std::string text = "usage: " + prog_;
  for (const auto& p : positionals_) text += " " + p;
  text += " [options]\n\noptions:\n";
  for (const auto& o : options_) {
    if (o.hidden) continue;
    std::string head = "  " + o.name + (o.takes_value ? " " + (o.metavar.empty() ? std::string("X") : o.metavar) : "");
    if (head.size() < 24) head += std::string(24 - head.size(), ' ');
    else head += "\n" + std::string(24, ' ');
    text += head + o.help + "\n";
  }
  return text;
}

}  // namespace edgekit
