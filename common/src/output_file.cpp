#include "profinfer/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "profinfer/error.h"

namespace fs = std::filesystem;

namespace profinfer {

// A stream buffer over a file descriptor that remembers the first failed write.
class OutputFile::Buffer : public std::streambuf {
public:
    explicit Buffer(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
    int error() const { return error_; }
    bool drain() {
        char* p = pbase();
        while (p < pptr() && !error_) {
            ssize_t n = ::write(fd_, p, size_t(pptr() - p));
            if (n > 0)
                p += n;
            else if (n < 0 && errno != EINTR)
                error_ = errno;
        }
        setp(buf_, buf_ + sizeof buf_);
        return !error_;
    }

protected:
    int_type overflow(int_type c) override {
        if (!drain()) return traits_type::eof();
        if (!traits_type::eq_int_type(c, traits_type::eof())) *pptr() = char(c), pbump(1);
        return traits_type::not_eof(c);
    }
    int sync() override { return drain() ? 0 : -1; }

private:
    int fd_;
    int error_ = 0;
    char buf_[1 << 16];
};

namespace {

const char* kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISFIFO(m)) return "a FIFO";
    return "not a regular file";
}

bool written_into(mode_t m) { return S_ISFIFO(m) || S_ISCHR(m); }

}  // namespace

OutputFile::OutputFile(fs::path destination, const std::vector<fs::path>& content_of) : dest_(std::move(destination)) {
    if (dest_.empty()) throw Error("no output file given");
    const std::string name = dest_.string();
    struct stat here{};
    if (::lstat(dest_.c_str(), &here) == 0 && !S_ISREG(here.st_mode)) {
        struct stat there{};
        const bool link = S_ISLNK(here.st_mode);
        const bool resolves = !link || ::stat(dest_.c_str(), &there) == 0;
        const mode_t m = link ? there.st_mode : here.st_mode;
        // A link to our own standard output or error (/dev/stdout, /dev/fd/2, /proc/self/fd/1):
        // written there, at the descriptor's offset and mode, whatever it is open on.
        int own = -1;
        for (int fd : {1, 2}) {
            struct stat o{};
            if (link && resolves && own < 0 && ::fstat(fd, &o) == 0 && o.st_dev == there.st_dev && o.st_ino == there.st_ino)
                own = fd;
        }
        if (own >= 0 || (resolves && written_into(m))) {  // /dev/null, a pipe, a terminal: written into as it is
            fd_ = own >= 0 ? ::fcntl(own, F_DUPFD_CLOEXEC, 3) : ::open(dest_.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
            if (fd_ < 0) throw Error("cannot write " + name + ": " + std::strerror(errno));
            buf_ = std::make_unique<Buffer>(fd_);
            stream_ = std::make_unique<std::ostream>(buf_.get());
            return;
        }
        if (link)
            throw Error("cannot write " + name + ": it is a symbolic link" +
                        (resolves ? std::string(" to ") + (S_ISREG(m) ? "a file" : kind_of(m)) : " to nothing") +
                        "; profinfer neither writes through links nor replaces them: give the path it points to");
        throw Error("cannot write " + name + ": it is " + kind_of(here.st_mode) + "; refusing to replace it");
    }
    fs::path dir = dest_.has_parent_path() ? dest_.parent_path() : fs::path(".");
    std::string tmpl = (dir / ("." + dest_.filename().string() + ".tmp-XXXXXX")).string();
    fd_ = mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd_ < 0) throw Error("cannot write " + name + ": " + std::strerror(errno));
    tmp_ = tmpl;
    mode_t mask = umask(0);
    umask(mask);
    mode_t mode = 0666;
    for (const auto& f : content_of) {
        struct stat src{};
        if (::stat(f.c_str(), &src) == 0) mode &= src.st_mode;
    }
    fchmod(fd_, mode & ~mask);
    buf_ = std::make_unique<Buffer>(fd_);
    stream_ = std::make_unique<std::ostream>(buf_.get());
}

OutputFile::~OutputFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void OutputFile::commit() {
    stream_->flush();
    int err = buf_->error();
    if (!err && ::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) err = errno;
    if (::close(fd_) != 0 && !err) err = errno;
    fd_ = -1;
    if (!err && stream_->bad()) err = EIO;
    if (!err && !tmp_.empty() && ::rename(tmp_.c_str(), dest_.c_str()) != 0) err = errno;
    if (err) throw Error("cannot write " + dest_.string() + ": " + std::strerror(err));
    tmp_.clear();
}

void OutputFile::write(const fs::path& destination, const std::string& content, const std::vector<fs::path>& content_of) {
    OutputFile f(destination, content_of);
    f.stream() << content;
    f.commit();
}

PrivateTempDir::PrivateTempDir(const std::string& prefix) {
    std::error_code ec;
    fs::path base = fs::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string tmpl = (base / (prefix + "-XXXXXX")).string();
    if (!mkdtemp(tmpl.data())) throw Error("cannot create a temporary directory in " + base.string() + ": " + std::strerror(errno));
    path_ = tmpl;
}

PrivateTempDir::~PrivateTempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
}

void create_private_file(const fs::path& path) {
    int fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_NOFOLLOW | O_WRONLY | O_CLOEXEC, 0600);
    if (fd < 0) {
        int err = errno;
        if (err == EEXIST)
            throw Error(path.string() + " already exists" +
                        (fs::is_symlink(fs::symlink_status(path)) ? " (as a symlink)" : "") +
                        "; choose another -o or remove it");
        throw Error("cannot create " + path.string() + ": " + std::strerror(err));
    }
    ::close(fd);
}

}  // namespace profinfer
