#pragma once
// Small string helpers shared by config, compare and ladder (no torch here).
#include <cstdint>
#include <string>
#include <vector>

namespace trainbench {

std::size_t edit_distance(const std::string& a, const std::string& b);
// The closest candidate within a small edit distance, or "" when none is close.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);
std::string join(const std::vector<std::string>& parts, const std::string& sep);
// &, <, > and " as XML entities: text and attribute values of the SVG charts.
std::string xml_escape(const std::string& s);
std::vector<std::string> split(const std::string& text, char sep);
// "file10" after "file9": digit runs compare by value.
bool natural_less(const std::string& a, const std::string& b);
std::uint64_t fnv1a64(const std::string& text);
std::string hex64(std::uint64_t value);
std::string replace_all(std::string text, const std::string& from, const std::string& to);

}  // namespace trainbench
