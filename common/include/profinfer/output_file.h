#pragma once
// Files profinfer writes for the user. Nothing is written through a symlink or over a
// file half-way: the data goes to a new temporary file beside the destination
// (created exclusively) and is renamed onto it once every write has succeeded, so a
// full disk leaves the old file (or none) and an error, never a truncated result.
#include <filesystem>
#include <memory>
#include <vector>
#include <ostream>
#include <streambuf>
#include <string>

namespace profinfer {

//
// What DESTINATION may be: a new name or a regular file (replaced whole, atomically); a
// FIFO or a character device, directly or through a symlink (/dev/null, /dev/stdout, a
// pipe: written into, never replaced). Anything else is refused in one line and left as
// it is: a symlink to a file or to nothing (neither followed nor replaced), a block
// device, a socket, a directory.
//
// CONTENT_OF: the files the output is made from (trace databases). A regular output gets
// no more permission than any of them has (a 0600 trace's names stay private).
class OutputFile {
public:
    explicit OutputFile(std::filesystem::path destination, const std::vector<std::filesystem::path>& content_of = {});
    ~OutputFile();  // without commit(): the temporary file is removed
    OutputFile(const OutputFile&) = delete;
    OutputFile& operator=(const OutputFile&) = delete;

    std::ostream& stream() { return *stream_; }
    // Flushes, checks every write and the close, and renames onto the destination.
    // Throws profinfer::Error naming the file and the reason (e.g. no space left).
    void commit();

    // Writes CONTENT to DESTINATION in one go (the same guarantees).
    static void write(const std::filesystem::path& destination, const std::string& content,
                      const std::vector<std::filesystem::path>& content_of = {});

private:
    class Buffer;
    std::filesystem::path dest_, tmp_;
    int fd_ = -1;
    std::unique_ptr<Buffer> buf_;
    std::unique_ptr<std::ostream> stream_;
};

// A new directory only we can use (mkdtemp under $TMPDIR, mode 0700), removed with
// everything in it when this goes out of scope.
class PrivateTempDir {
public:
    explicit PrivateTempDir(const std::string& prefix);
    ~PrivateTempDir();
    PrivateTempDir(const PrivateTempDir&) = delete;
    PrivateTempDir& operator=(const PrivateTempDir&) = delete;
    const std::filesystem::path& path() const { return path_; }

private:
    std::filesystem::path path_;
};

// Creates PATH for a new trace database: exclusively (an existing file, even an
// empty one, or a symlink, dangling or not, is refused) and readable by its owner only.
void create_private_file(const std::filesystem::path& path);

}  // namespace profinfer
