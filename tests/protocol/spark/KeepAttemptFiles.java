// Spark's own commit protocol, plus what a test needs from a speculative attempt: the files it wrote. Every task
// attempt's files (an unpartitioned write) are copied, before its task commit, to <fixtures.keep.dir>/<attempt id>/;
// the attempt named by fixtures.fail.attempt (task number "_" Spark attempt number) then fails instead of
// committing, as a speculative attempt that lost does, and Spark runs the task again. Built and used by
// tests/protocol/make_spark_fixtures.py.
package fixtures;

import java.io.IOException;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.FileUtil;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.lib.output.FileOutputCommitter;
import org.apache.spark.TaskContext;
import org.apache.spark.internal.io.FileCommitProtocol;
import org.apache.spark.sql.execution.datasources.SQLHadoopMapReduceCommitProtocol;

public class KeepAttemptFiles extends SQLHadoopMapReduceCommitProtocol {
  private final String output;

  public KeepAttemptFiles(String jobId, String path, boolean dynamicPartitionOverwrite) {
    super(jobId, path, dynamicPartitionOverwrite);
    this.output = path;
  }

  @Override
  public FileCommitProtocol.TaskCommitMessage commitTask(TaskAttemptContext context) {
    Configuration conf = context.getConfiguration();
    TaskAttemptID attempt = context.getTaskAttemptID();
    try {
      Path work = new FileOutputCommitter(new Path(output), context).getWorkPath();
      FileSystem fs = work.getFileSystem(conf);
      Path keep = new Path(conf.get("fixtures.keep.dir"), attempt.toString());
      for (FileStatus status : fs.listStatus(work)) {
        if (status.isFile() && !status.getPath().getName().startsWith(".")) {
          FileUtil.copy(fs, status.getPath(), fs, new Path(keep, status.getPath().getName()), false, conf);
        }
      }
    } catch (IOException e) {
      throw new RuntimeException(e);
    }
    // Spark numbers the Hadoop attempt by its unique task attempt id; the task's own attempt number is Spark's
    String name = attempt.getTaskID().getId() + "_" + TaskContext.get().attemptNumber();
    if (name.equals(conf.get("fixtures.fail.attempt"))) {
      throw new RuntimeException("attempt " + attempt + " fails before its task commit, as a lost speculative attempt");
    }
    return super.commitTask(context);
  }
}
