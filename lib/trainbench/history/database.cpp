#include "trainbench/history/database.hpp"

#include <cstdlib>

#include "trainbench/util/error.hpp"

namespace trainbench {

std::string sql_row::text(std::size_t i) const { return columns.at(i).value_or(""); }

std::int64_t sql_row::integer(std::size_t i) const {
  const auto& v = columns.at(i);
  TB_ASSERT(v.has_value(), "an integer column is NULL");
  return std::strtoll(v->c_str(), nullptr, 10);
}

double sql_row::real(std::size_t i) const {
  const auto& v = columns.at(i);
  TB_ASSERT(v.has_value(), "a number column is NULL");
  return std::strtod(v->c_str(), nullptr);
}

std::optional<double> sql_row::maybe_real(std::size_t i) const {
  if (!columns.at(i)) return std::nullopt;
  return real(i);
}

bool is_postgres_url(const std::string& location) {
  return location.rfind("postgresql://", 0) == 0 || location.rfind("postgres://", 0) == 0;
}

std::unique_ptr<database> open_database(const std::string& location, bool create, bool read_only) {
  if (location.empty()) throw input_error("--db: empty database location");
  return is_postgres_url(location) ? open_postgres(location, read_only)
                                   : open_sqlite(location, create && !read_only, read_only);
}

}  // namespace trainbench
