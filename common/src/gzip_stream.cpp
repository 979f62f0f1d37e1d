#include "profinfer/gzip_stream.h"

#include <cstring>
#include <string>

#include "profinfer/error.h"

namespace profinfer {

class GzipStream::Buffer : public std::streambuf {
public:
    Buffer(std::ostream& sink, int level) : sink_(sink) {
        std::memset(&z_, 0, sizeof z_);
        // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
        if (deflateInit2(&z_, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            throw Error("cannot start gzip compression (zlib)");
        setp(in_, in_ + sizeof in_);
    }
    ~Buffer() override { deflateEnd(&z_); }

    void finish() {
        if (finished_) return;
        compress(Z_FINISH);
        finished_ = true;
        sink_.flush();
        if (!sink_) throw Error("writing the compressed output failed");
    }

protected:
    int_type overflow(int_type c) override {
        compress(Z_NO_FLUSH);
        if (!traits_type::eq_int_type(c, traits_type::eof())) *pptr() = char(c), pbump(1);
        return traits_type::not_eof(c);
    }

private:
    void compress(int flush) {
        z_.next_in = reinterpret_cast<Bytef*>(pbase());
        z_.avail_in = unsigned(pptr() - pbase());
        int rc;
        do {
            z_.next_out = reinterpret_cast<Bytef*>(out_);
            z_.avail_out = sizeof out_;
            rc = deflate(&z_, flush);
            if (rc == Z_STREAM_ERROR) throw Error("gzip compression failed (zlib)");
            sink_.write(out_, std::streamsize(sizeof out_ - z_.avail_out));
            if (!sink_) throw Error("writing the compressed output failed");
        } while (z_.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
        setp(in_, in_ + sizeof in_);
    }

    std::ostream& sink_;
    z_stream z_;
    char in_[1 << 16], out_[1 << 16];
    bool finished_ = false;
};

GzipStream::GzipStream(std::ostream& sink, int level)
    : std::ostream(nullptr), buf_(std::make_unique<Buffer>(sink, level)) {
    rdbuf(buf_.get());
    exceptions(std::ios::badbit);  // a compression or sink error surfaces as an exception
}

GzipStream::~GzipStream() = default;

void GzipStream::finish() {
    flush();
    buf_->finish();
}

bool is_gzip_path(const std::filesystem::path& path) { return path.extension() == ".gz"; }

}  // namespace profinfer
