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

fn take_page() -> NonNull<u8> {
    if let Some(addr) = POOL.lock().pop() {
        let ptr = addr as *mut u8;
        // SAFETY: a pooled page is ALIGN bytes owned by the pool, now by the caller.
        unsafe { std::ptr::write_bytes(ptr, 0, ALIGN) };
        // SAFETY: pooled addresses come from a non-null allocation.
        return unsafe { NonNull::new_unchecked(ptr) };
    }
    let layout = Layout::from_size_align(ALIGN * POOL_CHUNK, ALIGN).expect("page pool layout");
    // SAFETY: layout has non-zero size.
    let raw = unsafe { alloc_zeroed(layout) };
    let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
    let mut pool = POOL.lock();
    pool.extend((1..POOL_CHUNK).map(|i| raw as usize + i * ALIGN));
    ptr
}

fn give_page(ptr: NonNull<u8>) {
    POOL.lock().push(ptr.as_ptr() as usize);
}

/// A zero-initialised byte buffer whose start is 4096-byte aligned.
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
        if len == 0 {
            return AlignedBuf {
                ptr: NonNull::dangling(),
                len: 0,
            };
        }
        if len == ALIGN {
            return AlignedBuf {
                ptr: take_page(),
                len,
            };
        }
        let layout = Self::layout(len);
        // SAFETY: layout has non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        AlignedBuf { ptr, len }
    }

    pub fn from_slice(data: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(data.len());
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
            // SAFETY: allocated in `zeroed` with the same layout.
            unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
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
}
