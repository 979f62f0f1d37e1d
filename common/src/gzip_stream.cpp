#include "profinfer/gzip_stream.h"

#include <boost/iostreams/filter/gzip.hpp>
#include <boost/iostreams/filtering_streambuf.hpp>

#include "profinfer/error.h"

namespace profinfer {

// Boost.Iostreams' gzip compressor in front of the sink (gzip framing: header and trailer).
class GzipStream::Buffer : public boost::iostreams::filtering_ostreambuf {
public:
    Buffer(std::ostream& sink, int level) : sink_(sink) {
        push(boost::iostreams::gzip_compressor(boost::iostreams::gzip_params(level)));
        push(sink);
    }
    void finish() {
        if (finished_) return;
        finished_ = true;
        reset();  // closes the compressor: the rest of the data and the trailer go out
        sink_.flush();
        if (!sink_) throw Error("writing the compressed output failed");
    }

private:
    std::ostream& sink_;
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
    try {
        buf_->finish();
    } catch (const boost::iostreams::gzip_error& e) {
        throw Error(std::string("gzip compression failed: ") + e.what());
    }
}

bool is_gzip_path(const std::filesystem::path& path) { return path.extension() == ".gz"; }

}  // namespace profinfer
