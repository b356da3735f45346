#pragma once
// Reference numbers for ladder.svg (the article's samples/s per rung): from a --reference file,
// or from the comment block at the top of the ladder's profiles. Torch-free.
#include <map>
#include <string>
#include <vector>

namespace trainbench {

// samples/s per rung name
using ladder_reference = std::map<std::string, double>;

// A --reference file: one "rung samples/s" per line ("rung: samples/s" as in YAML works too);
// '#' starts a comment, blank lines are skipped. Throws input_error naming the file and line.
ladder_reference parse_reference(const std::string& text, const std::string& source);

// A profile's leading comment block, as configs/ladder/00-baseline.yaml has it:
//   #   00-baseline         542.7
// Lines whose first word is one of `rungs` and whose second is a positive number count; the
// rest of the header (prose, other numbers) is ignored.
ladder_reference header_reference(const std::string& profile_text, const std::vector<std::string>& rungs);

}  // namespace trainbench
