import CSystemShims

/// The process's malloc (glibc), told to give freed memory back to the
/// kernel. Without it, the buffers of connections that held large answers
/// stay resident after the connections close (docs/http.md, "Memory comes
/// back").
package enum MemoryAllocator {
    /// Blocks of at least this many bytes are mapped on their own and
    /// unmapped when freed (`M_MMAP_THRESHOLD`): large answers and output
    /// buffers. glibc's own default starts at 128 KiB but rises to the
    /// largest block freed (up to 32 MiB), after which such blocks are kept.
    package static let mappedBlockBytesMin: Int32 = 128 * 1024

    /// Fixes the mmap threshold at `mappedBlockBytesMin`, turning off glibc's
    /// dynamic one. Process-wide; call once at start-up. Returns whether
    /// glibc took it.
    @discardableResult
    package static func mapLargeBlocks() -> Bool {
        roost_malloc_set_mmap_threshold(mappedBlockBytesMin) == 1
    }

    /// Gives the kernel every free page malloc holds (`malloc_trim(0)`).
    /// O(heap): walks every arena's free chunks; call rarely, off the hot path.
    /// Returns whether any memory was released.
    @discardableResult
    package static func returnFreePages() -> Bool {
        roost_malloc_trim() == 1
    }
}
