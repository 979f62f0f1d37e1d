// The ring-buffer consumer on arbitrary records: it may refuse a record (profinfer::Error)
// but never crash, read out of bounds or overflow, whatever the kernel side sends.
#include <cstdint>
#include <cstring>
#include <vector>

#include "profinfer/error.h"
#include "profinfer/events.h"
#include "profinfer/store.h"
#include "profinfer/trace_tables.h"
#include "struct_layout.h"
#include "trace_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace profinfer;
    store::Database db(":memory:", store::Database::Mode::Create);
    GgmlLayout layout = GgmlLayout::builtin();
    store::TraceTables tables(db);
    TraceWriter writer(tables, layout, SchedPeers::Comm);
    // Input: records, each a 2-byte length then that many bytes; the first four bytes of
    // each record choose its kind and whether its header's size field is made right.
    size_t at = 0;
    while (at + 2 <= size) {
        size_t n = size_t(data[at]) | size_t(data[at + 1]) << 8;
        at += 2;
        n = std::min(n, size - at);
        std::vector<uint64_t> aligned((n + 7) / 8 + 1);  // ring buffer records are 8-byte aligned
        std::memcpy(aligned.data(), data + at, n);
        if (n >= sizeof(pi_event_header)) {
            auto* h = reinterpret_cast<pi_event_header*>(aligned.data());
            if (h->reserved & 1) h->size = uint32_t(n);
            if (h->reserved & 2) h->kind = 1 + h->kind % (PI_EV_KIND_MAX - 1);
        }
        try {
            writer.write(aligned.data(), n);
        } catch (const Error&) {
        }
        at += n;
    }
    try {
        writer.commit();
    } catch (const Error&) {
    }
    return 0;
}
