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

OutputFile::OutputFile(fs::path destination) : dest_(std::move(destination)) {
    if (dest_.empty()) throw Error("no output file given");
    fs::path dir = dest_.has_parent_path() ? dest_.parent_path() : fs::path(".");
    if (fs::is_directory(fs::symlink_status(dest_)))
        throw Error("cannot write " + dest_.string() + ": it is a directory");
    std::string tmpl = (dir / ("." + dest_.filename().string() + ".tmp-XXXXXX")).string();
    fd_ = mkostemp(tmpl.data(), O_CLOEXEC);
    if (fd_ < 0) throw Error("cannot write " + dest_.string() + ": " + std::strerror(errno));
    tmp_ = tmpl;
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd_, 0666 & ~mask);
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
    if (!err && ::fsync(fd_) != 0 && errno != EINVAL) err = errno;
    if (::close(fd_) != 0 && !err) err = errno;
    fd_ = -1;
    if (!err && stream_->bad()) err = EIO;
    if (!err && ::rename(tmp_.c_str(), dest_.c_str()) != 0) err = errno;
    if (err) throw Error("cannot write " + dest_.string() + ": " + std::strerror(err));
    tmp_.clear();
}

void OutputFile::write(const fs::path& destination, const std::string& content) {
    OutputFile f(destination);
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
