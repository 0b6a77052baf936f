//! Uploads in parts: how a file larger than one NATS message reaches the job
//! files through the job API (shared/protocol/src/files_api.rs).
//!
//! The Object Store cannot append, and an upload's parts may reach different
//! orchestrators (the API is a queue group), so each part is an object of its
//! own, `uploads/<tenant>/<upload>/<index>`, in the same bucket as the job
//! files (its `max_age` drops parts nobody committed). A commit reads the
//! parts in order, checks the size and sha256 the client announced, writes
//! the file through [`JobFiles::write`] (the size cap and reserved
//! directories apply) and deletes the parts. Parts are kept per tenant: a
//! commit only looks under its own tenant, so an upload id seen by another
//! tenant is useless to it. Names never clash with job files, which all
//! start with a job id.

use crate::{FileError, FileMeta, FilePath, JobFiles};
use flotilla_protocol::digest::sha256_hex;
use flotilla_protocol::files_api::UploadId;
use flotilla_protocol::ids::{JobId, Tenant};

/// What a client announced about an upload it wants assembled.
#[derive(Clone, Debug)]
pub struct Upload {
    /// The upload id.
    pub id: UploadId,
    /// Number of parts (`0..parts`).
    pub parts: u32,
    /// Announced size.
    pub size: u64,
    /// Announced lowercase hex sha256.
    pub sha256: String,
}

/// A part in staging, as the store lists it: what a quota counts and a
/// sweep of expired parts removes.
#[derive(Clone, Debug)]
pub struct StagedPart {
    /// The object's name, `uploads/<tenant>/<upload>/<index>`.
    name: String,
    /// The tenant segment of the name.
    pub tenant: String,
    /// The upload segment.
    pub upload: String,
    /// The part's index.
    pub index: u32,
    /// Its size in bytes.
    pub size: u64,
    /// When it was stored, if the store says.
    pub modified: Option<time::OffsetDateTime>,
}

impl JobFiles {
    /// Every staged part of every tenant (one listing of the bucket).
    pub async fn staged_parts(&self) -> Result<Vec<StagedPart>, FileError> {
        let objects = self.backend.list("uploads/").await.map_err(FileError::Store)?;
        Ok(objects
            .into_iter()
            .filter_map(|(name, info)| {
                let mut segments = name.strip_prefix("uploads/")?.split('/');
                let (tenant, upload, index) = (segments.next()?, segments.next()?, segments.next()?);
                Some(StagedPart {
                    tenant: tenant.to_string(),
                    upload: upload.to_string(),
                    index: index.parse().ok()?,
                    size: info.size,
                    modified: info.modified,
                    name,
                })
            })
            .collect())
    }

    /// Deletes one staged part (a sweep of expired parts).
    pub async fn delete_staged(&self, part: &StagedPart) -> Result<(), FileError> {
        self.backend.delete(&part.name).await.map_err(FileError::Store)
    }

    fn part_name(tenant: &Tenant, upload: &UploadId, index: u32) -> String {
        format!("uploads/{tenant}/{upload}/{index:08}")
    }

    /// Stores part `index` of `upload` for `tenant`.
    pub async fn stage_part(
        &self,
        tenant: &Tenant,
        upload: &UploadId,
        index: u32,
        bytes: &[u8],
    ) -> Result<(), FileError> {
        let name = Self::part_name(tenant, upload, index);
        self.backend.put(&name, bytes, Default::default()).await.map_err(FileError::Store)
    }

    /// Assembles `upload`'s parts into `path` of `job`, then deletes the
    /// parts. Fails, writing nothing, when a part is missing or the bytes do
    /// not match the announced size and sha256.
    pub async fn commit_upload(
        &self,
        tenant: &Tenant,
        upload: &Upload,
        job: &JobId,
        path: &FilePath,
    ) -> Result<FileMeta, FileError> {
        let incomplete = |reason: String| FileError::Upload { path: path.clone(), reason };
        if let Some(prefix) = super::reserved_prefix(path) {
            return Err(FileError::Reserved { path: path.clone(), prefix });
        }
        if upload.size > self.max_file_bytes {
            return Err(FileError::TooLarge { path: path.clone(), size: upload.size, max: self.max_file_bytes });
        }
        let mut bytes = Vec::with_capacity(usize::try_from(upload.size).unwrap_or(0));
        for index in 0..upload.parts {
            let name = Self::part_name(tenant, &upload.id, index);
            let (part, _) =
                self.backend.get(&name, self.max_file_bytes).await.map_err(FileError::Store)?.ok_or_else(|| {
                    incomplete(format!("part {index} of upload {} is missing; upload it again", upload.id))
                })?;
            bytes.extend_from_slice(&part);
            if bytes.len() as u64 > upload.size {
                return Err(incomplete(format!("the parts hold more than the announced {} bytes", upload.size)));
            }
        }
        if bytes.len() as u64 != upload.size {
            return Err(incomplete(format!("{} bytes arrived where {} were announced", bytes.len(), upload.size)));
        }
        let actual = sha256_hex(&bytes);
        if actual != upload.sha256 {
            return Err(incomplete(format!("sha256 is {actual}, the client announced {}", upload.sha256)));
        }
        self.write(job, path, &bytes).await?;
        self.discard_upload(tenant, upload).await;
        let modified = self.stat(job, path).await.ok().flatten().and_then(|m| m.modified);
        Ok(FileMeta { path: path.clone(), size: upload.size, modified })
    }

    /// Deletes `upload`'s parts (best effort: the bucket's `max_age` removes
    /// what is left).
    pub async fn discard_upload(&self, tenant: &Tenant, upload: &Upload) {
        for index in 0..upload.parts {
            if let Err(e) = self.backend.delete(&Self::part_name(tenant, &upload.id, index)).await {
                tracing::debug!(upload = %upload.id, index, error = %e, "upload part not deleted; max_age will");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upload(parts: &[&[u8]]) -> (Upload, Vec<u8>) {
        let all: Vec<u8> = parts.concat();
        let u = Upload {
            id: UploadId::new_v4(),
            parts: parts.len() as u32,
            size: all.len() as u64,
            sha256: sha256_hex(&all),
        };
        (u, all)
    }

    #[tokio::test]
    async fn parts_assemble_in_order_and_are_removed() {
        let files = JobFiles::in_memory(1 << 20);
        let tenant = Tenant::default();
        let (u, all) = upload(&[b"line 1\n", b"line 2\n", b"line 3\n"]);
        for (i, part) in [b"line 1\n", b"line 2\n", b"line 3\n"].iter().enumerate() {
            files.stage_part(&tenant, &u.id, i as u32, *part).await.unwrap();
        }
        let (job, path) = (JobId::new(), FilePath::parse("/inputs/a.txt").unwrap());
        let meta = files.commit_upload(&tenant, &u, &job, &path).await.unwrap();
        assert_eq!(meta.size, all.len() as u64);
        assert_eq!(files.read(&job, &path).await.unwrap(), all);
        let again = files.commit_upload(&tenant, &u, &JobId::new(), &path).await.unwrap_err();
        assert!(again.to_string().contains("part 0 of upload"), "{again}");
    }

    #[tokio::test]
    async fn staged_parts_are_listed_per_tenant_and_upload_and_can_be_deleted() {
        let files = JobFiles::in_memory(1 << 20);
        let (acme, globex) = (Tenant::new("acme").unwrap(), Tenant::new("globex").unwrap());
        let (u, _) = upload(&[b"abc"]);
        files.stage_part(&acme, &u.id, 0, b"abc").await.unwrap();
        files.stage_part(&acme, &u.id, 12, b"de").await.unwrap();
        files.stage_part(&globex, &u.id, 0, b"f").await.unwrap();
        files.write(&JobId::new(), &FilePath::parse("/inputs/x").unwrap(), b"not staged").await.unwrap();
        let mut parts = files.staged_parts().await.unwrap();
        parts.sort_by_key(|p| (p.tenant.clone(), p.index));
        let seen: Vec<_> = parts.iter().map(|p| (p.tenant.as_str(), p.index, p.size)).collect();
        assert_eq!(seen, [("acme", 0, 3), ("acme", 12, 2), ("globex", 0, 1)]);
        assert!(parts.iter().all(|p| p.upload == u.id.to_string() && p.modified.is_some()));
        files.delete_staged(&parts[0]).await.unwrap();
        assert_eq!(files.staged_parts().await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn another_tenant_cannot_commit_an_upload() {
        let files = JobFiles::in_memory(1 << 20);
        let (u, _) = upload(&[b"secret"]);
        files.stage_part(&Tenant::new("acme").unwrap(), &u.id, 0, b"secret").await.unwrap();
        let (job, path) = (JobId::new(), FilePath::parse("/inputs/s").unwrap());
        let e = files.commit_upload(&Tenant::new("globex").unwrap(), &u, &job, &path).await.unwrap_err();
        assert!(matches!(e, FileError::Upload { .. }), "{e}");
        assert!(files.list(&job).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_mismatch_writes_nothing() {
        let files = JobFiles::in_memory(1 << 20);
        let tenant = Tenant::default();
        let (mut u, _) = upload(&[b"abc"]);
        files.stage_part(&tenant, &u.id, 0, b"abd").await.unwrap();
        let (job, path) = (JobId::new(), FilePath::parse("/inputs/x").unwrap());
        let e = files.commit_upload(&tenant, &u, &job, &path).await.unwrap_err();
        assert!(e.to_string().contains("sha256"), "{e}");
        u.size = 2;
        let e = files.commit_upload(&tenant, &u, &job, &path).await.unwrap_err();
        assert!(e.to_string().contains("more than the announced"), "{e}");
        assert!(files.stat(&job, &path).await.unwrap().is_none());
        let reserved = FilePath::parse("/large_tool_results/t/report").unwrap();
        let (u, _) = upload(&[b"abd"]);
        let e = files.commit_upload(&tenant, &u, &job, &reserved).await.unwrap_err();
        assert!(matches!(e, FileError::Reserved { .. }), "{e}");
    }
}
