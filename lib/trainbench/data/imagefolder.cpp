// torchvision's ImageFolder layout: root/<class>/**/<file>.jpg. The index is one pass of readdir
// over the tree (no stat per file where the file system reports entry types), with paths packed
// into one buffer: ImageNet's 1.28 M files must not take minutes to list.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "trainbench/data/dataset.hpp"
#include "trainbench/util/error.hpp"
#include "trainbench/util/log.hpp"

namespace trainbench {
namespace fs = std::filesystem;

namespace {

bool is_jpeg_name(const char* name) {
  const std::size_t n = std::strlen(name);
  auto ends_with = [&](const char* ext) {
    const std::size_t k = std::strlen(ext);
    return n > k && strncasecmp(name + n - k, ext, k) == 0;
  };
  return ends_with(".jpg") || ends_with(".jpeg");
}

// Closes the directory stream (and so its descriptor) on every path out.
struct dir_handle {
  DIR* d = nullptr;
  explicit dir_handle(int fd) : d(fd >= 0 ? fdopendir(fd) : nullptr) {
    if (!d && fd >= 0) close(fd);
  }
  ~dir_handle() {
    if (d) closedir(d);
  }
  dir_handle(const dir_handle&) = delete;
  dir_handle& operator=(const dir_handle&) = delete;
};

enum class entry_kind { file, directory };

// d_type where the file system gives it; stat (following links, as os.walk(followlinks=True)) only otherwise.
entry_kind kind_of(int dir_fd, const dirent* e) {
  if (e->d_type == DT_DIR) return entry_kind::directory;
  if (e->d_type != DT_LNK && e->d_type != DT_UNKNOWN) return entry_kind::file;
  struct stat st;
  if (fstatat(dir_fd, e->d_name, &st, 0) == 0 && S_ISDIR(st.st_mode)) return entry_kind::directory;
  return entry_kind::file;  // also a dangling link: it fails, naming the file, when read
}

struct folder_files {
  std::string rel;  // relative to the dataset root, no trailing '/'
  std::vector<std::string> files;
};

// Every folder below `rel` with its JPEG names, as os.walk lists them.
void walk(int parent_fd, const std::string& name, const std::string& rel, int depth, std::vector<folder_files>& out,
          std::int64_t& ignored) {
  if (depth > 32) throw input_error("image folder: more than 32 nested folders at '" + rel + "' (a symlink loop?)");
  const int fd = openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw input_error("image folder: cannot open folder '" + rel + "': " + std::strerror(errno));
  dir_handle dir(fd);
  if (!dir.d) throw input_error("image folder: cannot list folder '" + rel + "': " + std::strerror(errno));
  folder_files here;
  here.rel = rel;
  std::vector<std::string> subdirs;
  while (const dirent* e = readdir(dir.d)) {
    if (e->d_name[0] == '.' && (e->d_name[1] == 0 || (e->d_name[1] == '.' && e->d_name[2] == 0))) continue;
    if (kind_of(fd, e) == entry_kind::directory) {
      subdirs.emplace_back(e->d_name);
    } else if (is_jpeg_name(e->d_name)) {
      here.files.emplace_back(e->d_name);
    } else {
      ++ignored;
    }
  }
  std::sort(here.files.begin(), here.files.end());
  out.push_back(std::move(here));
  for (const auto& s : subdirs) walk(fd, s, rel + "/" + s, depth + 1, out, ignored);
}

std::vector<std::string> class_folders(const fs::path& root) {
  const int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw input_error("image folder '" + root.string() + "': cannot open: " + std::strerror(errno));
  dir_handle dir(fd);
  std::vector<std::string> classes;
  while (const dirent* e = readdir(dir.d)) {
    if (e->d_name[0] == '.' && (e->d_name[1] == 0 || (e->d_name[1] == '.' && e->d_name[2] == 0))) continue;
    if (kind_of(fd, e) == entry_kind::directory) classes.emplace_back(e->d_name);
  }
  std::sort(classes.begin(), classes.end());
  return classes;
}

// root/train or root/val when the root is split that way, else the root itself.
fs::path split_folder(const fs::path& root, const std::string& split) {
  std::error_code ec;
  if (!fs::exists(root, ec)) throw input_error("image folder '" + root.string() + "' does not exist");
  if (!fs::is_directory(root, ec)) throw input_error("image folder '" + root.string() + "' is not a folder");
  if (fs::is_directory(root / split, ec)) return root / split;
  for (const char* other : {"train", "val"}) {
    if (other != split && fs::is_directory(root / other, ec))
      throw input_error("image folder '" + root.string() + "' has " + other + "/ but no " + split +
                        "/ folder for data.split: " + split);
  }
  return root;
}

class image_folder : public dataset {
 public:
  explicit image_folder(file_list files) : files_(std::move(files)) {}
  std::int64_t size() const override { return files_.size(); }
  int num_classes() const override { return static_cast<int>(files_.classes.size()); }
  int channels() const override { return 3; }
  int height() const override { return 0; }
  int width() const override { return 0; }
  sample_view sample(std::int64_t) const override {
    TB_ASSERT(false, "an image folder has no decoded samples in memory; the loader decodes its files");
  }
  std::string describe() const override {
    return "imagefolder " + files_.root.string() + " (" + std::to_string(files_.size()) + " JPEGs, " +
           std::to_string(files_.classes.size()) + " classes)";
  }
  const file_list* files() const override { return &files_; }

 private:
  file_list files_;
};

}  // namespace

std::shared_ptr<const dataset> read_image_folder(const fs::path& root, const std::string& split) {
  const auto start = std::chrono::steady_clock::now();
  file_list list;
  list.root = split_folder(root, split);
  list.classes = class_folders(list.root);
  if (list.classes.empty())
    throw input_error("image folder '" + list.root.string() +
                      "' has no class folders (expected root/<class>/<file>.jpg)");
  const int root_fd = open(list.root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) throw input_error("image folder '" + list.root.string() + "': " + std::strerror(errno));
  struct fd_guard {
    int fd;
    ~fd_guard() { close(fd); }
  } guard{root_fd};
  std::vector<folder_files> folders;
  for (std::size_t c = 0; c < list.classes.size(); ++c) {
    folders.clear();
    walk(root_fd, list.classes[c], list.classes[c], 0, folders, list.ignored_files);
    // os.walk's order after sorted(): folders by path, files by name within each.
    std::sort(folders.begin(), folders.end(),
              [](const folder_files& a, const folder_files& b) { return a.rel < b.rel; });
    const std::int64_t before = list.size();
    for (const auto& f : folders) {
      for (const auto& name : f.files) {
        list.offsets.push_back(list.names.size());
        list.names.insert(list.names.end(), f.rel.begin(), f.rel.end());
        list.names.push_back('/');
        list.names.insert(list.names.end(), name.begin(), name.end());
        list.names.push_back('\0');
        list.labels.push_back(static_cast<int>(c));
      }
    }
    if (list.size() == before) list.empty_classes.push_back(list.classes[c]);
  }
  if (list.labels.empty())
    throw input_error("image folder '" + list.root.string() + "': no .jpg or .jpeg files in its " +
                      std::to_string(list.classes.size()) + " class folders");
  for (const auto& c : list.empty_classes)
    log_warn("image folder '" + list.root.string() + "': class folder '" + c +
             "' has no .jpg or .jpeg files (its label stays reserved)");
  if (list.ignored_files > 0)
    log_warn("image folder '" + list.root.string() + "': ignored " + std::to_string(list.ignored_files) +
             " files without a .jpg or .jpeg extension");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  log_info("indexed " + std::to_string(list.size()) + " JPEGs in " + std::to_string(list.classes.size()) +
           " classes under " + list.root.string() + " in " + std::to_string(static_cast<long long>(ms)) + " ms");
  return std::make_shared<image_folder>(std::move(list));
}

}  // namespace trainbench
