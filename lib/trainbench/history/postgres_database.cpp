// A team's shared store: PostgreSQL through libpq, its C client (libpqxx would add a C++ layer
// and a second package for the few calls made here).
#include <libpq-fe.h>

#include <cstdio>
#include <cstdlib>
#include <regex>

#include "trainbench/history/database.hpp"
#include "trainbench/util/error.hpp"

namespace trainbench {

namespace {

// Every writer of every trainbench takes this transaction-level lock first, so two jobs that
// add at once queue instead of failing on each other's rows (or on creating the schema).
constexpr const char* writer_lock = "SELECT pg_advisory_xact_lock(7410019283)";

// How long a writer waits for that lock: as long as SQLite's busy timeout, so a writer stuck
// behind a hung job fails with a message instead of waiting forever. The tests shorten it
// through TRAINBENCH_TEST_HISTORY_LOCK_MS.
constexpr int writer_lock_wait_ms = 120000;

int lock_wait_ms() {
  if (const char* v = std::getenv("TRAINBENCH_TEST_HISTORY_LOCK_MS"); v && *v) {
    const long ms = std::strtol(v, nullptr, 10);
    if (ms > 0 && ms < writer_lock_wait_ms) return static_cast<int>(ms);
  }
  return writer_lock_wait_ms;
}

std::string seconds_text(int ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g s", ms / 1000.0);
  return buf;
}

// The URL as messages show it: the password replaced.
std::string without_password(const std::string& url) {
  return std::regex_replace(url, std::regex("^(postgres(ql)?://[^:/@]*):[^@]*@"), "$1:***@");
}

// `?` placeholders as $1, $2, ... (the store's SQL has no `?` inside string literals).
std::string numbered(const std::string& sql) {
  std::string out;
  int n = 0;
  for (char c : sql) {
    if (c == '?')
      out += "$" + std::to_string(++n);
    else
      out += c;
  }
  return out;
}

std::string as_text(const double d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return buf;
}

void ignore_notice(void*, const char*) {}

class postgres_database : public database {
 public:
  postgres_database(const std::string& url, bool read_only) : where_(without_password(url)), read_only_(read_only) {
    conn_ = PQconnectdb(with_connect_timeout(url).c_str());
    if (!conn_ || PQstatus(conn_) != CONNECTION_OK) {
      const std::string why = conn_ ? trimmed(PQerrorMessage(conn_)) : "out of memory";
      PQfinish(conn_);
      throw input_error("--db " + where_ +
                        ": cannot connect to PostgreSQL (is the server up, and the user, password and "
                        "database right?): " +
                        why);
    }
    PQsetNoticeProcessor(conn_, ignore_notice, nullptr);
    try {
      if (read_only_) query("SET default_transaction_read_only = on", {});
    } catch (...) {
      PQfinish(conn_);
      throw;
    }
  }
  ~postgres_database() override { PQfinish(conn_); }

  std::vector<sql_row> execute(const std::string& sql, const std::vector<sql_value>& params) override {
    std::vector<std::string> texts(params.size());
    std::vector<const char*> values(params.size(), nullptr);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const auto& v = params[i];
      if (std::holds_alternative<std::nullptr_t>(v)) continue;
      if (const auto* n = std::get_if<std::int64_t>(&v)) texts[i] = std::to_string(*n);
      if (const auto* d = std::get_if<double>(&v)) texts[i] = as_text(*d);
      if (const auto* s = std::get_if<std::string>(&v)) texts[i] = *s;
      values[i] = texts[i].c_str();
    }
    PGresult* res = PQexecParams(conn_, numbered(sql).c_str(), static_cast<int>(params.size()), nullptr, values.data(),
                                 nullptr, nullptr, 0);
    const auto status = PQresultStatus(res);
    if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
      const std::string why = trimmed(res ? PQresultErrorMessage(res) : PQerrorMessage(conn_));
      const bool lost = PQstatus(conn_) != CONNECTION_OK;
      PQclear(res);
      throw run_error("runtime", "--db " + where_ + ": " + (lost ? "the connection was lost: " : "") + why +
                                     " (in: " + sql.substr(0, 80) + ")");
    }
    std::vector<sql_row> rows;
    const int n_rows = PQntuples(res), n_cols = PQnfields(res);
    rows.reserve(static_cast<std::size_t>(n_rows));
    for (int r = 0; r < n_rows; ++r) {
      sql_row row;
      for (int c = 0; c < n_cols; ++c) {
        if (PQgetisnull(res, r, c))
          row.columns.emplace_back(std::nullopt);
        else
          row.columns.emplace_back(
              std::string(PQgetvalue(res, r, c), static_cast<std::size_t>(PQgetlength(res, r, c))));
      }
      rows.push_back(std::move(row));
    }
    PQclear(res);
    return rows;
  }

  void begin_write() override {
    TB_ASSERT(!read_only_, "a write on a database opened read-only");
    query("BEGIN", {});
    const int wait_ms = lock_wait_ms();
    query("SET LOCAL lock_timeout = " + std::to_string(wait_ms), {});
    PGresult* res = PQexec(conn_, writer_lock);
    const auto status = PQresultStatus(res);
    if (status == PGRES_TUPLES_OK || status == PGRES_COMMAND_OK) {
      PQclear(res);
      return;
    }
    const char* state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
    const bool timed_out = state && std::string(state) == "55P03";  // lock_not_available
    const std::string why = trimmed(res ? PQresultErrorMessage(res) : PQerrorMessage(conn_));
    PQclear(res);
    rollback();
    if (timed_out)
      throw run_error("runtime", "--db " + where_ + ": still locked by another writer after " + seconds_text(wait_ms) +
                                     " (another trainbench's history add, or a session holding advisory lock "
                                     "7410019283); nothing was written");
    throw run_error("runtime", "--db " + where_ + ": " + why + " (in: " + writer_lock + ")");
  }
  void commit() override { query("COMMIT", {}); }
  void rollback() noexcept override {
    if (PQtransactionStatus(conn_) != PQTRANS_IDLE) PQclear(PQexec(conn_, "ROLLBACK"));
  }
  bool has_table(const std::string& name) override {
    return !query(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND "
                "table_name = ?",
                {name})
                .empty();
  }
  std::string backend() const override { return "postgresql"; }
  std::string where() const override { return where_; }
  bool read_only() const override { return read_only_; }

 private:
  static std::string trimmed(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
  }

  std::string where_;
  bool read_only_ = false;
  PGconn* conn_ = nullptr;
};

}  // namespace

std::string with_connect_timeout(const std::string& url) {
  if (url.find("connect_timeout=") != std::string::npos) return url;
  return url + (url.find('?') == std::string::npos ? "?" : "&") +
         "connect_timeout=" + std::to_string(postgres_connect_timeout_s);
}

std::unique_ptr<database> open_postgres(const std::string& url, bool read_only) {
  return std::make_unique<postgres_database>(url, read_only);
}

}  // namespace trainbench
