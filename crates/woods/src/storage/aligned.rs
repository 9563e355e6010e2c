//! Page-aligned buffers, as direct I/O requires.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

const ALIGN: usize = 4096;

/// Single-page buffers come from a pool carved out of `POOL_CHUNK` pages at a time: the
/// allocator rounds every 4096-aligned 4 KiB allocation up to nearly twice that, so a cache
/// of single pages would hold about twice its budget in resident memory. Pooled pages are
/// reused, never returned to the system: the pool holds at most the largest number of
/// single-page buffers alive at once (the cache's frames and the reads in flight).
const POOL_CHUNK: usize = 64;

/// Free pooled pages (addresses).
static POOL: parking_lot::Mutex<Vec<usize>> = parking_lot::const_mutex(Vec::new());

fn take_page(zero: bool) -> NonNull<u8> {
    if let Some(addr) = POOL.lock().pop() {
        let ptr = addr as *mut u8;
        if zero {
            // SAFETY: a pooled page is ALIGN bytes owned by the pool, now by the caller.
            unsafe { std::ptr::write_bytes(ptr, 0, ALIGN) };
        }
        // SAFETY: pooled addresses come from a non-null allocation.
        return unsafe { NonNull::new_unchecked(ptr) };
    }
    let layout = Layout::from_size_align(ALIGN * POOL_CHUNK, ALIGN).expect("page pool layout");
    let raw = map_zeroed(layout.size());
    let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
    let mut pool = POOL.lock();
    pool.extend((1..POOL_CHUNK).map(|i| raw as usize + i * ALIGN));
    ptr
}

/// `len` bytes of zeroed memory, page-aligned, for the pool (which never gives it back): fresh
/// anonymous pages, which the kernel zeroes. `alloc_zeroed` of a 4096-aligned layout zeroes
/// them again in user space, a `memset` of the whole cache as it first fills (5% of the
/// instructions of 5,000 cold lookups with a 4 MiB cache, callgrind). Null on failure.
fn map_zeroed(len: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping of `len` bytes at an address the kernel picks;
    // nothing else refers to it.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

fn give_page(ptr: NonNull<u8>) {
    POOL.lock().push(ptr.as_ptr() as usize);
}

/// Freed buffers larger than a page (read-ahead windows, run builders' chunks: usually 256 KiB)
/// are kept for the next buffer of the same size, up to this many bytes in all: allocations that
/// large are mapped fresh by the C allocator each time, and the page faults, zeroing and unmapping
/// of every merge's buffers cost an `nbtree` load about 5% of its background thread's time.
const LARGE_POOL_BYTES: usize = 4 << 20;

/// Free large buffers, most recently freed last.
struct LargePool {
    /// (allocation size, address).
    free: Vec<(usize, usize)>,
    held: usize,
    limit: usize,
}

static LARGE_POOL: parking_lot::Mutex<LargePool> = parking_lot::const_mutex(LargePool {
    free: Vec::new(),
    held: 0,
    limit: LARGE_POOL_BYTES,
});

impl LargePool {
    /// A free buffer of `size` bytes, not yet zeroed.
    fn take(&mut self, size: usize) -> Option<usize> {
        let i = self.free.iter().rposition(|&(s, _)| s == size)?;
        self.held -= size;
        Some(self.free.remove(i).1)
    }

    /// Keeps a freed buffer; returns the buffers to free now (the oldest, to stay within the
    /// limit, or the one given when it alone is over it).
    fn give(&mut self, size: usize, addr: usize) -> Vec<(usize, usize)> {
        if size > self.limit {
            return vec![(size, addr)];
        }
        let mut out = Vec::new();
        while self.held + size > self.limit {
            let (s, a) = self.free.remove(0);
            self.held -= s;
            out.push((s, a));
        }
        self.free.push((size, addr));
        self.held += size;
        out
    }
}

fn take_large(size: usize, zero: bool) -> Option<NonNull<u8>> {
    let addr = LARGE_POOL.lock().take(size)?;
    let ptr = addr as *mut u8;
    if zero {
        // SAFETY: a pooled buffer is `size` bytes owned by the pool, now by the caller.
        unsafe { std::ptr::write_bytes(ptr, 0, size) };
    }
    // SAFETY: pooled addresses come from a non-null allocation.
    Some(unsafe { NonNull::new_unchecked(ptr) })
}

/// Keeps a freed large buffer for reuse, freeing what the pool lets go.
fn give_large(size: usize, ptr: NonNull<u8>) {
    let out = LARGE_POOL.lock().give(size, ptr.as_ptr() as usize);
    for (s, a) in out {
        // SAFETY: every pooled buffer was allocated by `AlignedBuf::new` with the layout of its
        // (already rounded) size.
        unsafe { dealloc(a as *mut u8, AlignedBuf::layout(s)) }
    }
}

/// A zero-initialised byte buffer whose start is 4096-byte aligned.
#[doc(hidden)]
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access only hands out &[u8].
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// A zeroed buffer of `len` bytes (`len` is rounded up to a whole number of 4 KiB for the
    /// allocation, but the buffer reports `len`).
    pub fn zeroed(len: usize) -> AlignedBuf {
        AlignedBuf::new(len, true)
    }

    /// A buffer of `len` bytes that the caller overwrites before reading (a device read, a
    /// copy, pages zeroed one by one as they are filled): zeros, or the bytes of a buffer freed
    /// earlier, never uninitialised memory. Saves zeroing what is overwritten anyway.
    pub fn for_overwrite(len: usize) -> AlignedBuf {
        AlignedBuf::new(len, false)
    }

    fn new(len: usize, zero: bool) -> AlignedBuf {
        if len == 0 {
            return AlignedBuf {
                ptr: NonNull::dangling(),
                len: 0,
            };
        }
        if len == ALIGN {
            return AlignedBuf {
                ptr: take_page(zero),
                len,
            };
        }
        let layout = Self::layout(len);
        if let Some(ptr) = take_large(layout.size(), zero) {
            return AlignedBuf { ptr, len };
        }
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::for_overwrite(data.len());
        b.copy_from_slice(data);
        b
    }

    fn layout(len: usize) -> Layout {
        let size = len.div_ceil(ALIGN) * ALIGN;
        // Cannot fail: ALIGN is a power of two and size is far below isize::MAX for any buffer
        // woods allocates (bounded by the value and extent limits).
        Layout::from_size_align(size, ALIGN).expect("aligned buffer layout")
    }
}

impl Default for AlignedBuf {
    /// An empty buffer.
    fn default() -> Self {
        AlignedBuf::zeroed(0)
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.len == ALIGN {
            give_page(self.ptr);
        } else if self.len > 0 {
            // Allocated in `new` with this layout; the pool frees it with the same.
            give_large(Self::layout(self.len).size(), self.ptr);
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (or dangling with len 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: ptr is valid for len bytes and uniquely owned.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pooled_pages_come_back_zeroed_and_aligned() {
        let mut pages: Vec<AlignedBuf> = (0..3 * POOL_CHUNK)
            .map(|_| AlignedBuf::zeroed(ALIGN))
            .collect();
        for p in &mut pages {
            assert_eq!(p.as_ptr() as usize % ALIGN, 0);
            p.fill(0xAB);
        }
        drop(pages);
        for _ in 0..3 * POOL_CHUNK {
            let p = AlignedBuf::zeroed(ALIGN);
            assert_eq!(p.len(), ALIGN);
            assert_eq!(p.as_ptr() as usize % ALIGN, 0);
            assert!(p.iter().all(|&b| b == 0), "a reused page was not zeroed");
        }
        let big = AlignedBuf::from_slice(&[7u8; 3 * ALIGN]);
        assert_eq!(big.as_ptr() as usize % ALIGN, 0);
        assert!(big.iter().all(|&b| b == 7));
    }

    #[test]
    fn the_large_pool_reuses_by_size_and_lets_the_oldest_go() {
        // A pool of its own: the process-wide one is shared by tests running at once.
        let mut p = LargePool {
            free: Vec::new(),
            held: 0,
            limit: 10,
        };
        assert!(p.give(4, 100).is_empty());
        assert!(p.give(3, 200).is_empty());
        assert_eq!(p.take(5), None);
        assert_eq!(p.take(4), Some(100));
        assert_eq!(p.held, 3);
        assert!(p.give(4, 300).is_empty());
        // 3 + 4 + 4 > 10: the oldest (200) goes.
        assert_eq!(p.give(4, 400), vec![(3, 200)]);
        assert_eq!(p.held, 8);
        // The most recently freed buffer of a size comes back first.
        assert_eq!(p.take(4), Some(400));
        // Larger than the whole pool: freed at once, nothing else let go.
        assert_eq!(p.give(11, 500), vec![(11, 500)]);
        assert_eq!(p.held, 4);
    }

    #[test]
    fn large_buffers_come_back_zeroed_and_aligned() {
        for len in [77 * ALIGN, 77 * ALIGN - 100, 64 * ALIGN] {
            for _ in 0..8 {
                let mut b = AlignedBuf::zeroed(len);
                assert_eq!(b.len(), len);
                assert_eq!(b.as_ptr() as usize % ALIGN, 0);
                assert!(b.iter().all(|&x| x == 0), "a reused buffer was not zeroed");
                b.fill(0xCD);
                // A buffer for overwriting may hold an earlier buffer's bytes; the next zeroed
                // one of the size still comes back zeroed.
                let mut o = AlignedBuf::for_overwrite(len);
                assert_eq!(o.len(), len);
                assert_eq!(o.as_ptr() as usize % ALIGN, 0);
                o.fill(0xEF);
            }
        }
        assert!(LARGE_POOL.lock().held <= LARGE_POOL_BYTES);
    }
}
