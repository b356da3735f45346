// The embedded backend: one SQLite file in WAL mode, writers queued by a busy timeout.
#include <sqlite3.h>
#include <sys/vfs.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <unordered_map>

#include "trainbench/history/database.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/log.hpp"

namespace trainbench {

namespace {

// Long enough for another CI job's whole `history add` to finish first.
constexpr int busy_timeout_ms = 120000;

class sqlite_database : public database {
 public:
  sqlite_database(const std::string& path, bool create, bool read_only) : path_(path), read_only_(read_only) {
    namespace fs = std::filesystem;
    const fs::path file(path);
    if (!create && !fs::exists(file))
      throw input_error("--db '" + path + "': no such database (history add creates it)");
    if (read_only) {
      open_read_only();
      return;
    }
    if (file.has_parent_path()) {
      std::error_code ec;
      fs::create_directories(file.parent_path(), ec);
    }
    open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    try {
      set_journal(file);
      query("PRAGMA foreign_keys = ON");
      query("PRAGMA synchronous = NORMAL");
    } catch (...) {
      close();
      throw;
    }
  }
  ~sqlite_database() override { close(); }

  std::vector<sql_row> execute(const std::string& sql, const std::vector<sql_value>& params) override {
    sqlite3_stmt* stmt = prepared(sql);
    sqlite3_reset(stmt);
    sqlite3_clear_bindings(stmt);
    for (std::size_t i = 0; i < params.size(); ++i) bind(stmt, static_cast<int>(i + 1), params[i]);
    std::vector<sql_row> rows;
    while (true) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) {
        sqlite3_reset(stmt);
        fail(rc, sql);
      }
      rows.push_back(row_of(stmt));
    }
    sqlite3_reset(stmt);
    return rows;
  }

  void begin_write() override {
    TB_ASSERT(!read_only_, "a write on a database opened read-only");
    query("BEGIN IMMEDIATE");
  }
  void commit() override { query("COMMIT"); }
  void rollback() noexcept override {
    if (db_ && !sqlite3_get_autocommit(db_)) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  bool has_table(const std::string& name) override {
    return !query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = ?", {name}).empty();
  }
  std::string backend() const override { return "sqlite"; }
  std::string where() const override { return path_; }
  bool read_only() const override { return read_only_; }

 private:
  void open(const std::string& name, int flags) {
    if (sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
      const std::string why = db_ ? sqlite3_errmsg(db_) : "out of memory";
      sqlite3_close(db_);
      db_ = nullptr;
      throw input_error("--db '" + path_ + "': cannot open it as a SQLite database: " + why);
    }
    sqlite3_busy_timeout(db_, busy_timeout_ms);
    sqlite3_extended_result_codes(db_, 0);
  }

  // A reader takes the file as it is. Reading a WAL database needs its -shm file, which SQLite
  // makes beside it; where it cannot (a read-only folder or mount, a copy without it), the file
  // is opened as immutable: no locks, no -shm, fine for a file nobody writes while it is read.
  void open_read_only() {
    open(path_, SQLITE_OPEN_READONLY);
    const int rc = sqlite3_exec(db_, "SELECT COUNT(*) FROM sqlite_master", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if (rc != SQLITE_READONLY && rc != SQLITE_CANTOPEN) {
      const std::string what = sqlite3_errmsg(db_);
      close();
      if (rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT)
        throw input_error("--db '" + path_ + "': not a usable SQLite database (" + what + ")");
      throw run_error("runtime", "--db '" + path_ + "': " + what);
    }
    close();
    open("file:" + uri_path(path_) + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
  }

  static std::string uri_path(const std::string& path) {
    std::string out;
    for (unsigned char c : std::filesystem::absolute(path).string()) {
      if (c == '%' || c == '?' || c == '#' || c <= ' ' || c >= 0x7f) {
        char buf[4];
        std::snprintf(buf, sizeof buf, "%%%02X", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
    return out;
  }

  // WAL, except on a network file system: there its shared-memory index is not shared between
  // hosts, and two hosts' writers would corrupt the file. The rollback journal locks the file
  // itself, as far as the file system's locks hold.
  void set_journal(const std::filesystem::path& file) {
    struct statfs info {};
    const std::filesystem::path folder = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
    const auto network = statfs(folder.c_str(), &info) == 0 ? network_file_system(static_cast<long>(info.f_type))
                                                            : std::nullopt;
    if (!network) {
      set_wal();
      return;
    }
    const auto mode = query("PRAGMA journal_mode = DELETE");
    log_warn("--db '" + path_ + "': on a network file system (" + *network +
             "): SQLite's WAL is unsafe there, so this database uses the rollback journal (journal_mode " +
             (mode.empty() ? std::string("?") : mode[0].text(0)) +
             "); for a store shared between machines use PostgreSQL");
  }

  // WAL lets readers go on while one writer writes. Switching a new file to it takes a lock the
  // busy handler does not wait for, so two processes creating the file at once retry here.
  void set_wal() {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
    while (true) {
      const int rc = sqlite3_exec(db_, "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr);
      if (rc == SQLITE_OK) return;
      if (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) fail(rc, "PRAGMA journal_mode = WAL");
      if (std::chrono::steady_clock::now() > give_up) fail(rc, "PRAGMA journal_mode = WAL");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  sqlite3_stmt* prepared(const std::string& sql) {
    auto hit = statements_.find(sql);
    if (hit != statements_.end()) return hit->second;
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr);
    if (rc != SQLITE_OK) fail(rc, sql);
    statements_.emplace(sql, stmt);
    return stmt;
  }

  static void bind(sqlite3_stmt* stmt, int i, const sql_value& v) {
    if (std::holds_alternative<std::nullptr_t>(v)) sqlite3_bind_null(stmt, i);
    if (const auto* n = std::get_if<std::int64_t>(&v)) sqlite3_bind_int64(stmt, i, *n);
    if (const auto* d = std::get_if<double>(&v)) sqlite3_bind_double(stmt, i, *d);
    if (const auto* s = std::get_if<std::string>(&v))
      sqlite3_bind_text(stmt, i, s->data(), static_cast<int>(s->size()), SQLITE_TRANSIENT);
  }

  static sql_row row_of(sqlite3_stmt* stmt) {
    sql_row row;
    const int n = sqlite3_column_count(stmt);
    for (int c = 0; c < n; ++c) {
      switch (sqlite3_column_type(stmt, c)) {
        case SQLITE_NULL:
          row.columns.emplace_back(std::nullopt);
          break;
        case SQLITE_FLOAT: {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.17g", sqlite3_column_double(stmt, c));
          row.columns.emplace_back(buf);
          break;
        }
        default: {
          const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, c));
          row.columns.emplace_back(std::string(text, static_cast<std::size_t>(sqlite3_column_bytes(stmt, c))));
        }
      }
    }
    return row;
  }

  // A file that is not a database, or a damaged one, is bad input (exit 2); anything else is a
  // failure of the run (exit 1).
  [[noreturn]] void fail(int rc, const std::string& sql) {
    const std::string what = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    if (rc == SQLITE_NOTADB || rc == SQLITE_CORRUPT)
      throw input_error("--db '" + path_ + "': not a usable SQLite database (" + what +
                        "); restore it from a backup or point --db at another file");
    if (rc == SQLITE_BUSY)
      throw run_error("runtime", "--db '" + path_ + "': still locked by another writer after " +
                                     std::to_string(busy_timeout_ms / 1000) + " s: " + what);
    throw run_error("runtime", "--db '" + path_ + "': " + what + " (in: " + sql.substr(0, 80) + ")");
  }

  void close() {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    statements_.clear();
    if (db_) sqlite3_close(db_);
    db_ = nullptr;
  }

  std::string path_;
  bool read_only_ = false;
  sqlite3* db_ = nullptr;
  std::unordered_map<std::string, sqlite3_stmt*> statements_;
};

}  // namespace

std::optional<std::string> network_file_system(long f_type) {
  // statfs(2)'s magic numbers (linux/magic.h and the file systems' own headers).
  switch (static_cast<unsigned long>(f_type) & 0xffffffffUL) {
    case 0x6969UL:
      return "NFS";
    case 0x517BUL:
      return "SMB";
    case 0xFF534D42UL:
      return "CIFS";
    case 0xFE534D42UL:
      return "SMB2";
    case 0x65735546UL:
      return "FUSE";
    case 0x00C36400UL:
      return "CephFS";
    case 0x5346414FUL:
      return "AFS";
    case 0x01021997UL:
      return "9P";
    case 0x0BD00BD0UL:
      return "Lustre";
    case 0x47504653UL:
      return "GPFS";
    default:
      return std::nullopt;
  }
}

std::unique_ptr<database> open_sqlite(const std::string& path, bool create, bool read_only) {
  return std::make_unique<sqlite_database>(path, create, read_only);
}

}  // namespace trainbench
