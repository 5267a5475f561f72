// What each stage of the job commit does, in the order they run (plugins/read_model.py COMMIT_STAGES names them).
export const COMMIT_STAGE_HELP: Record<string, string> = {
  recovery: "reading every expected task's commit record (adopting tasks committed in earlier application attempts)",
  plan: "fixing the commit plan: every move and deletion, written before the first move",
  withdraw: "withdrawing the _SUCCESS markers the commit is about to make untrue",
  moves: "publishing the files (renames, S3 copies, or completing multipart uploads)",
  deletes: "removing the old files the mode replaces",
  commit_log: "writing the commit log _commits/<job>.json",
  markers: "writing _SUCCESS (and each partition's, in dynamic mode), the root's last",
  cleanup_after_success: "deleting the job's working directory _temporary/<job> after _SUCCESS",
};
