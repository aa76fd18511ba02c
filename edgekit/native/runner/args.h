// A small command-line parser with argparse's rules and messages: --name VALUE and --name=VALUE,
// unique prefixes, negative numbers as values, "--" ending the options, choices, -h/--help.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace edgekit {

struct Option {
  std::string name;  // "--threads"
  bool takes_value = true;
  bool repeatable = false;  // action="append"
  std::vector<std::string> choices;
  std::string metavar;
  std::string help;
  bool hidden = false;
};

struct ParsedArgs {
  std::vector<std::string> positionals;
  std::map<std::string, std::vector<std::string>> values;  // by option name; flags hold ""
  bool help = false;

  bool has(const std::string& name) const { return values.count(name) > 0; }
  const std::string& last(const std::string& name) const { return values.at(name).back(); }
};

class ArgParser {
 public:
  ArgParser(std::string prog, std::vector<std::string> positionals) : prog_(std::move(prog)), positionals_(std::move(positionals)) {}
  ArgParser& add(Option option) {
    options_.push_back(std::move(option));
    return *this;
  }
  // UsageError with argparse's wording (without its usage lines) for a wrong command line.
  ParsedArgs parse(const std::vector<std::string>& argv) const;
  std::string usage() const;  // the -h text

 private:
  const Option* lookup(const std::string& name) const;
  std::string prog_;
  std::vector<std::string> positionals_;
  std::vector<Option> options_;
};

// Python's int()/float() of an option value, or UsageError "argument --x: invalid int value: 'v'".
int64_t parse_int(const std::string& option, const std::string& text);
double parse_float(const std::string& option, const std::string& text);

}  // namespace edgekit
