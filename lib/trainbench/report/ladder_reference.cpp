#include "trainbench/report/ladder_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

// A positive finite number filling the whole word, else false.
bool positive_number(const std::string& word, double& out) {
  if (word.empty()) return false;
  char* end = nullptr;
  out = std::strtod(word.c_str(), &end);
  return end == word.c_str() + word.size() && std::isfinite(out) && out > 0;
}

std::string strip_comment(const std::string& line) { return line.substr(0, line.find('#')); }

}  // namespace

ladder_reference parse_reference(const std::string& text, const std::string& source) {
  ladder_reference out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    std::istringstream words(strip_comment(line));
    std::string name, value, extra;
    if (!(words >> name)) continue;
    if (name.size() > 1 && name.back() == ':') name.pop_back();
    double v = 0;
    if (!(words >> value) || (words >> extra) || !positive_number(value, v))
      throw input_error(source + " line " + std::to_string(n) +
                        ": expected 'rung samples/s' (a rung's file stem and a " + "positive number), got '" + line +
                        "'");
    if (!out.emplace(name, v).second)
      throw input_error(source + " line " + std::to_string(n) + ": rung '" + name + "' is given twice");
  }
  if (out.empty()) throw input_error(source + ": no 'rung samples/s' line");
  return out;
}

ladder_reference header_reference(const std::string& profile_text, const std::vector<std::string>& rungs) {
  ladder_reference out;
  std::istringstream in(profile_text);
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    if (line[first] != '#') break;  // the header ends at the first key
    std::istringstream words(line.substr(first + 1));
    std::string name, value;
    double v = 0;
    if (!(words >> name >> value) || !positive_number(value, v)) continue;
    if (std::find(rungs.begin(), rungs.end(), name) != rungs.end()) out.emplace(name, v);
  }
  return out;
}

}  // namespace trainbench
