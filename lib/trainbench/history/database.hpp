#pragma once
// The small interface the history store talks SQL through; one file per backend
// (sqlite_database.cpp, postgres_database.cpp). No torch here.
//
// The SQL the store writes is the subset both backends run unchanged: `?` placeholders (the
// PostgreSQL backend numbers them), TEXT, BIGINT and DOUBLE PRECISION columns, no
// auto-increment. Every value travels as text or a number; a double is written with 17
// significant digits, so it reads back exactly.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace trainbench {

using sql_value = std::variant<std::nullptr_t, std::int64_t, double, std::string>;

// One row of a result: each column as text, or nullopt for SQL NULL.
struct sql_row {
  std::vector<std::optional<std::string>> columns;
  const std::optional<std::string>& at(std::size_t i) const { return columns.at(i); }
  std::string text(std::size_t i) const;  // "" for NULL
  std::int64_t integer(std::size_t i) const;
  double real(std::size_t i) const;
  std::optional<double> maybe_real(std::size_t i) const;
};

class database {
 public:
  virtual ~database() = default;
  // Runs one statement; returns the rows it produced (none for most).
  std::vector<sql_row> query(const std::string& sql, const std::vector<sql_value>& params = {}) {
    return execute(sql, params);
  }
  // A write transaction that waits for other writers (SQLite: BEGIN IMMEDIATE under the busy
  // timeout; PostgreSQL: BEGIN and a transaction-level advisory lock), so two writers queue.
  virtual void begin_write() = 0;
  virtual void commit() = 0;
  virtual void rollback() noexcept = 0;
  virtual bool has_table(const std::string& name) = 0;
  // "sqlite" or "postgresql"
  virtual std::string backend() const = 0;
  // Where it is, for messages: the file, or the URL without its password.
  virtual std::string where() const = 0;
  // Opened read-only (show, gate): begin_write is refused, and callers keep what they would
  // have stored in memory.
  virtual bool read_only() const = 0;

 protected:
  virtual std::vector<sql_row> execute(const std::string& sql, const std::vector<sql_value>& params) = 0;
};

// A file path (SQLite) or a postgresql:// / postgres:// URL. Throws input_error (exit 2) when the
// file is not a SQLite database, is missing and `create` is false (a reader's typo must not
// make an empty database), or the server cannot be reached or refuses the login.
// `read_only` (show, gate): SQLite opens the file read-only, and as immutable where even that
// needs a write (a WAL database in a folder this user cannot write, with no -shm file beside
// it); PostgreSQL sets default_transaction_read_only, so a role that may only SELECT reads.
std::unique_ptr<database> open_database(const std::string& location, bool create = true, bool read_only = false);
std::unique_ptr<database> open_sqlite(const std::string& path, bool create, bool read_only = false);
std::unique_ptr<database> open_postgres(const std::string& url, bool read_only = false);
// The URL trainbench connects with: the given one, with connect_timeout=30 added when it sets none
// (libpq waits forever for an unreachable host otherwise).
constexpr int postgres_connect_timeout_s = 30;
std::string with_connect_timeout(const std::string& url);
bool is_postgres_url(const std::string& location);

// The name of a network or user-space file system by statfs's f_type (NFS, SMB/CIFS, FUSE, ...),
// nullopt for a local one. SQLite's WAL needs shared memory that such file systems do not share
// between hosts: a database there uses the rollback journal instead (sqlite_database.cpp).
std::optional<std::string> network_file_system(long f_type);

// Commits at the end of a scope that finished, rolls back when an exception leaves it.
class write_transaction {
 public:
  explicit write_transaction(database& db) : db_(db) { db_.begin_write(); }
  ~write_transaction() {
    if (!done_) db_.rollback();
  }
  write_transaction(const write_transaction&) = delete;
  write_transaction& operator=(const write_transaction&) = delete;
  void commit() {
    db_.commit();
    done_ = true;
  }

 private:
  database& db_;
  bool done_ = false;
};

}  // namespace trainbench
