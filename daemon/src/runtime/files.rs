//! Bounds the files a WASM guest writes: `wasi:filesystem/types` passes
//! through to wasmtime-wasi, with every way of growing a file (a write at an
//! offset, a write or append stream, `set-size`) held to the capsule's
//! largest-file limit, as RLIMIT_FSIZE holds a tool's.
//!
//! A guest's workdir is also where roostd keeps the session's bookkeeping
//! (`guest.log`, `trace.jsonl`); without this a guest could grow any of them,
//! or a file of its own, until the disk is full. A write that would take a
//! file past the limit fails whole with `file-too-large` and writes nothing.
//!
//! The number of entries is bounded too: each file, directory or link a
//! guest makes (and each it removes, back) counts against its workdir's
//! `capabilities.limits.files` for as long as roostd runs, whichever session
//! or guest of it made them; past it, making one fails with `quota`.

use bytes::Bytes;
use std::future::Future;
use wasmtime::component::{HasData, Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemCtxView, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::filesystem::types::{
    self, ErrorCode, HostDescriptor, HostDirectoryEntryStream,
};
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, FsError, FsResult, OutputStream, Pollable, StreamError,
    StreamResult,
};

use super::entries::Entries;
use super::state::GuestState;

/// Replaces the `wasi:filesystem/types` functions `add_to_linker_async`
/// defined with the bounded ones. Called once per Engine, after it.
pub(crate) fn add_to_linker(linker: &mut Linker<GuestState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let added = types::add_to_linker::<GuestState, Bounded>(linker, |state| {
        let limit = state.file_limit;
        let entries = state.entries.clone();
        BoundedFs {
            fs: state.filesystem(),
            limit,
            entries,
        }
    });
    linker.allow_shadowing(false);
    added
}

/// The [`HasData`] marker for [`BoundedFs`].
struct Bounded;

impl HasData for Bounded {
    type Data<'a> = BoundedFs<'a>;
}

/// wasmtime-wasi's filesystem view, the largest size a file may reach and
/// the entries its guests may make.
pub(crate) struct BoundedFs<'a> {
    fs: WasiFilesystemCtxView<'a>,
    limit: u64,
    entries: Entries,
}

/// Makes an entry through `make`, if `entries` has room for it, and counts
/// it.
async fn counted<T>(entries: Entries, make: impl Future<Output = FsResult<T>>) -> FsResult<T> {
    entries.room()?;
    let made = make.await?;
    entries.made(1);
    Ok(made)
}

impl BoundedFs<'_> {
    /// `Ok` if a file may reach `end` bytes.
    fn allow(&self, end: Option<u64>) -> FsResult<()> {
        match end {
            Some(end) if end <= self.limit => Ok(()),
            _ => Err(ErrorCode::FileTooLarge.into()),
        }
    }

    /// The file `fd` names (not a directory), as the host sees it.
    fn file(&self, fd: &Resource<types::Descriptor>) -> FsResult<std::sync::Arc<std::fs::File>> {
        match self.fs.table.get(fd)? {
            Descriptor::File(f) => Ok(f.file.clone()),
            Descriptor::Dir(_) => Err(ErrorCode::BadDescriptor.into()),
        }
    }

    /// Puts `stream` (just made by wasmtime-wasi) behind a bound.
    fn bound(
        &mut self,
        stream: Resource<DynOutputStream>,
        file: std::sync::Arc<std::fs::File>,
        at: Position,
    ) -> FsResult<Resource<DynOutputStream>> {
        let inner = self.fs.table.delete(stream)?;
        let capped: DynOutputStream = Box::new(CappedStream {
            inner,
            file,
            at,
            limit: self.limit,
        });
        Ok(self.fs.table.push(capped)?)
    }
}

impl types::Host for BoundedFs<'_> {
    fn convert_error_code(&mut self, err: FsError) -> wasmtime::Result<ErrorCode> {
        types::Host::convert_error_code(&mut self.fs, err)
    }

    fn filesystem_error_code(
        &mut self,
        err: Resource<wasmtime::Error>,
    ) -> wasmtime::Result<Option<ErrorCode>> {
        types::Host::filesystem_error_code(&mut self.fs, err)
    }
}

impl HostDescriptor for BoundedFs<'_> {
    async fn write(
        &mut self,
        fd: Resource<types::Descriptor>,
        buf: Vec<u8>,
        offset: types::Filesize,
    ) -> FsResult<types::Filesize> {
        self.allow(offset.checked_add(buf.len() as u64))?;
        self.fs.write(fd, buf, offset).await
    }

    async fn set_size(
        &mut self,
        fd: Resource<types::Descriptor>,
        size: types::Filesize,
    ) -> FsResult<()> {
        self.allow(Some(size))?;
        self.fs.set_size(fd, size).await
    }

    fn write_via_stream(
        &mut self,
        fd: Resource<types::Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynOutputStream>> {
        let file = self.file(&fd)?;
        let stream = self.fs.write_via_stream(fd, offset)?;
        self.bound(stream, file, Position::At(offset))
    }

    fn append_via_stream(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<Resource<DynOutputStream>> {
        let file = self.file(&fd)?;
        let stream = self.fs.append_via_stream(fd)?;
        self.bound(stream, file, Position::End)
    }

    // Everything else cannot grow a file: passed through unchanged.

    async fn advise(
        &mut self,
        fd: Resource<types::Descriptor>,
        offset: types::Filesize,
        len: types::Filesize,
        advice: types::Advice,
    ) -> FsResult<()> {
        self.fs.advise(fd, offset, len, advice).await
    }

    async fn sync_data(&mut self, fd: Resource<types::Descriptor>) -> FsResult<()> {
        self.fs.sync_data(fd).await
    }

    async fn get_flags(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<types::DescriptorFlags> {
        self.fs.get_flags(fd).await
    }

    async fn get_type(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<types::DescriptorType> {
        self.fs.get_type(fd).await
    }

    async fn set_times(
        &mut self,
        fd: Resource<types::Descriptor>,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        self.fs.set_times(fd, atim, mtim).await
    }

    async fn read(
        &mut self,
        fd: Resource<types::Descriptor>,
        len: types::Filesize,
        offset: types::Filesize,
    ) -> FsResult<(Vec<u8>, bool)> {
        self.fs.read(fd, len, offset).await
    }

    async fn read_directory(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<Resource<types::DirectoryEntryStream>> {
        self.fs.read_directory(fd).await
    }

    async fn sync(&mut self, fd: Resource<types::Descriptor>) -> FsResult<()> {
        self.fs.sync(fd).await
    }

    async fn create_directory_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<()> {
        counted(self.entries.clone(), self.fs.create_directory_at(fd, path)).await
    }

    async fn stat(&mut self, fd: Resource<types::Descriptor>) -> FsResult<types::DescriptorStat> {
        self.fs.stat(fd).await
    }

    async fn stat_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::DescriptorStat> {
        self.fs.stat_at(fd, path_flags, path).await
    }

    async fn set_times_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        atim: types::NewTimestamp,
        mtim: types::NewTimestamp,
    ) -> FsResult<()> {
        self.fs.set_times_at(fd, path_flags, path, atim, mtim).await
    }

    async fn link_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        old_path_flags: types::PathFlags,
        old_path: String,
        new_descriptor: Resource<types::Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        let link = self
            .fs
            .link_at(fd, old_path_flags, old_path, new_descriptor, new_path);
        counted(self.entries.clone(), link).await
    }

    async fn open_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
        oflags: types::OpenFlags,
        flags: types::DescriptorFlags,
    ) -> FsResult<Resource<types::Descriptor>> {
        if !oflags.contains(types::OpenFlags::CREATE) {
            return self.fs.open_at(fd, path_flags, path, oflags, flags).await;
        }
        // Only a file that was not there counts: looked for as the open will
        // look (through a link when it follows one: the link's target is
        // what it would make).
        let at = Resource::new_borrow(fd.rep());
        let there = self.fs.stat_at(at, path_flags, path.clone()).await;
        if there.is_ok() {
            return self.fs.open_at(fd, path_flags, path, oflags, flags).await;
        }
        let open = self.fs.open_at(fd, path_flags, path, oflags, flags);
        counted(self.entries.clone(), open).await
    }

    fn drop(&mut self, fd: Resource<types::Descriptor>) -> wasmtime::Result<()> {
        HostDescriptor::drop(&mut self.fs, fd)
    }

    async fn readlink_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<String> {
        self.fs.readlink_at(fd, path).await
    }

    async fn remove_directory_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<()> {
        self.fs.remove_directory_at(fd, path).await?;
        self.entries.made(-1);
        Ok(())
    }

    async fn rename_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        old_path: String,
        new_fd: Resource<types::Descriptor>,
        new_path: String,
    ) -> FsResult<()> {
        // A rename over an entry removes that one (a file saved through a
        // temporary one makes no more entries).
        let at = Resource::new_borrow(new_fd.rep());
        let replaced = self
            .fs
            .stat_at(at, types::PathFlags::empty(), new_path.clone())
            .await
            .is_ok();
        self.fs.rename_at(fd, old_path, new_fd, new_path).await?;
        if replaced {
            self.entries.made(-1);
        }
        Ok(())
    }

    async fn symlink_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        src_path: String,
        dest_path: String,
    ) -> FsResult<()> {
        counted(
            self.entries.clone(),
            self.fs.symlink_at(fd, src_path, dest_path),
        )
        .await
    }

    async fn unlink_file_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path: String,
    ) -> FsResult<()> {
        self.fs.unlink_file_at(fd, path).await?;
        self.entries.made(-1);
        Ok(())
    }

    fn read_via_stream(
        &mut self,
        fd: Resource<types::Descriptor>,
        offset: types::Filesize,
    ) -> FsResult<Resource<DynInputStream>> {
        self.fs.read_via_stream(fd, offset)
    }

    async fn is_same_object(
        &mut self,
        a: Resource<types::Descriptor>,
        b: Resource<types::Descriptor>,
    ) -> wasmtime::Result<bool> {
        self.fs.is_same_object(a, b).await
    }

    async fn metadata_hash(
        &mut self,
        fd: Resource<types::Descriptor>,
    ) -> FsResult<types::MetadataHashValue> {
        self.fs.metadata_hash(fd).await
    }

    async fn metadata_hash_at(
        &mut self,
        fd: Resource<types::Descriptor>,
        path_flags: types::PathFlags,
        path: String,
    ) -> FsResult<types::MetadataHashValue> {
        self.fs.metadata_hash_at(fd, path_flags, path).await
    }
}

impl HostDirectoryEntryStream for BoundedFs<'_> {
    async fn read_directory_entry(
        &mut self,
        stream: Resource<types::DirectoryEntryStream>,
    ) -> FsResult<Option<types::DirectoryEntry>> {
        self.fs.read_directory_entry(stream).await
    }

    fn drop(&mut self, stream: Resource<types::DirectoryEntryStream>) -> wasmtime::Result<()> {
        HostDirectoryEntryStream::drop(&mut self.fs, stream)
    }
}

/// Where a file stream writes next.
#[derive(Clone, Copy)]
enum Position {
    /// At this offset (a write stream; it moves on with each write).
    At(u64),
    /// At the file's end, wherever that is when the write comes.
    End,
}

/// A file output stream that refuses a write taking its file past `limit`.
struct CappedStream {
    inner: DynOutputStream,
    file: std::sync::Arc<std::fs::File>,
    at: Position,
    limit: u64,
}

impl CappedStream {
    /// Checks a write of `len` bytes and moves the position past it.
    fn admit(&mut self, len: usize) -> StreamResult<()> {
        let start = match self.at {
            Position::At(offset) => offset,
            // An append lands wherever the end is now (another instance of
            // the session may have written since): ask the file.
            Position::End => self
                .file
                .metadata()
                .map_err(|e| StreamError::LastOperationFailed(e.into()))?
                .len(),
        };
        match start.checked_add(len as u64) {
            Some(end) if end <= self.limit => {
                if let Position::At(offset) = &mut self.at {
                    *offset = end;
                }
                Ok(())
            }
            _ => Err(StreamError::LastOperationFailed(
                std::io::Error::from_raw_os_error(libc::EFBIG).into(),
            )),
        }
    }
}

#[async_trait::async_trait]
impl Pollable for CappedStream {
    async fn ready(&mut self) {
        self.inner.ready().await
    }
}

#[async_trait::async_trait]
impl OutputStream for CappedStream {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.admit(bytes.len())?;
        self.inner.write(bytes)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.inner.flush()
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        self.inner.check_write()
    }

    async fn blocking_write_and_flush(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.admit(bytes.len())?;
        self.inner.blocking_write_and_flush(bytes).await
    }

    fn write_zeroes(&mut self, nelem: usize) -> StreamResult<()> {
        self.admit(nelem)?;
        self.inner.write_zeroes(nelem)
    }

    async fn cancel(&mut self) {
        self.inner.cancel().await
    }
}
