#include <catch2/catch.hpp>

#include "trainbench/util/text.hpp"

using namespace trainbench;

TEST_CASE("edit distance and suggestions") {
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(closest_match("batch_sise", {"batch_size", "grad_accumulation"}) == "batch_size");
  CHECK(closest_match("zzzzzz", {"batch_size", "amp"}).empty());
}

TEST_CASE("natural sort puts rung 10 after rung 9") {
  CHECK(natural_less("09-x.yaml", "10-y.yaml"));
  CHECK(natural_less("rung2", "rung10"));
  CHECK_FALSE(natural_less("rung10", "rung2"));
  CHECK(natural_less("a", "b"));
}

TEST_CASE("split, join and replace") {
  CHECK(split("a.b.c", '.') == std::vector<std::string>{"a", "b", "c"});
  CHECK(join({"x", "y"}, ", ") == "x, y");
  CHECK(replace_all("reports/{name}.json", "{name}", "q") == "reports/q.json");
  CHECK(hex64(fnv1a64("a")) != hex64(fnv1a64("b")));
}
