"""Fetch and verify the MLCommons BERT inputs (`python -m data.download`, docs/data_download.md).

The modules, each with one job:

    published.py  the published MD5s of every input file and where each value comes from
    metadata.py   the MLC R2 metadata: a `NAME.uri` file holds the dataset's base URL, the
                  `NAME.md5` file beside it lists every file of the dataset with its MD5
    fetch.py      one file over HTTP(S): resumed from `NAME.part`, MD5-checked, then renamed
    unpack.py     the steps after the download: the text archive -> results4/ (each part
                  checked against the reference list), the checkpoint's data file under the
                  name TensorFlow reads
    datasets.py   one dataset end to end (metadata -> selected files -> unpack steps)
    __main__.py   the command line

Bad input (an unreachable server, a metadata file of another form, a file whose MD5 differs
from the published one, a file in the way that this program did not write) raises
DownloadError: one `error:` line and exit status 2, good files kept, nothing half-written under
a final name.
"""
