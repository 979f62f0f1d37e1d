#pragma once
// An output stream that gzip-compresses into another stream (Boost.Iostreams'
// gzip_compressor), so that a large output can be written compressed as it is produced:
// `-o trace.json.gz`.
#include <filesystem>
#include <memory>
#include <ostream>
#include <streambuf>

namespace profinfer {

class GzipStream : public std::ostream {
public:
    explicit GzipStream(std::ostream& sink, int level = 6);
    ~GzipStream() override;
    // Flushes the compressor and writes the gzip trailer; throws on a zlib or sink error.
    void finish();

private:
    class Buffer;
    std::unique_ptr<Buffer> buf_;
};

// True when PATH names a gzip file (ends in .gz).
bool is_gzip_path(const std::filesystem::path& path);

// WRITE(stream) into SINK, through a GzipStream when PATH (the output's name) ends in .gz;
// returns what WRITE returns.
template <class Write>
auto write_gzip_if_named(std::ostream& sink, const std::filesystem::path& path, Write&& write) {
    if (!is_gzip_path(path)) return write(sink);
    GzipStream gz(sink);
    auto result = write(static_cast<std::ostream&>(gz));
    gz.finish();
    return result;
}

}  // namespace profinfer
