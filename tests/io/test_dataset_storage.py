"""A dataset's storage view: a batch's files where its source keeps them, the rest under the
dataset's own root."""

from trajectory_assets import layout
from trajectory_assets.io.dataset_storage import BUILT_ON_ROUTED, DatasetStorage
from trajectory_assets.io.source_files import batch_key
from trajectory_assets.io.storage import Storage


def test_batch_files_go_to_their_sources_storage_and_the_rest_to_the_datasets(tmp_path):
    # a key whose readable part holds a dot and a "-<8 hex>." of its own: only the whole key routes
    tricky = batch_key("/in/run-deadbeef.jsonl")
    plain = batch_key("/in/b.jsonl")
    source = Storage(str(tmp_path / "source"))
    view = DatasetStorage(str(tmp_path / "dataset"), {tricky: source})
    for path in (layout.batch_source(tricky), layout.batch_trajectories(tricky), layout.batch_summary(tricky),
                 layout.batch_tool_use(tricky), layout.batch_quarantine(tricky)):
        view.write_bytes(path, b"x")
        assert (tmp_path / "source" / path).read_bytes() == b"x" and view.exists(path)
        assert view.uri(path) == source.uri(path)
        assert view.read_bytes(path) == b"x"
    # a batch the mapping does not name, and every other file, are the dataset's own
    for path in (layout.batch_summary(plain), layout.export_manifest("sft"), layout.STATS_JSON):
        view.write_bytes(path, b"y")
        assert (tmp_path / "dataset" / path).read_bytes() == b"y"
        assert not (tmp_path / "source" / path).exists()
    assert view.total_size([layout.batch_trajectories(tricky), layout.STATS_JSON]) == 2
    view.remove(layout.batch_tool_use(tricky))
    assert not (tmp_path / "source" / layout.batch_tool_use(tricky)).exists()


def test_every_batch_file_lives_in_a_batch_folder():
    key = batch_key("/in/a.jsonl")
    for path in (layout.batch_source(key), layout.batch_trajectories(key), layout.batch_summary(key),
                 layout.batch_tool_use(key), layout.batch_quarantine(key)):
        assert path.startswith(layout.BATCH_FOLDERS) and path.split("/")[-1].startswith(key + ".")


def test_every_method_of_storage_is_routed():
    """A method added to Storage that reaches the files itself must be routed here too, or a
    dataset would read or write a batch's file under its own root."""
    public = {name for name in vars(Storage) if not name.startswith("_") and callable(getattr(Storage, name))}
    routed = {name for name in vars(DatasetStorage) if not name.startswith("_")}
    assert public - routed == set(BUILT_ON_ROUTED)


def test_a_batchs_decontamination_flags_folder_is_its_sources(tmp_path):
    key = batch_key("/in/a.jsonl")
    source = Storage(str(tmp_path / "source"))
    view = DatasetStorage(str(tmp_path / "dataset"), {key: source})
    view.write_bytes(layout.batch_decontamination(key, "f" * 64), b"{}")
    assert (tmp_path / "source" / layout.batch_decontamination(key, "f" * 64)).exists()
    view.remove_folder(layout.batch_decontamination_folder(key))
    assert not (tmp_path / "source" / layout.batch_decontamination_folder(key)).exists()


def test_reading_opens_one_storage_per_source_and_routes_no_batch_of_the_datasets_own_root(tmp_path):
    own, other = str(tmp_path / "dataset"), str(tmp_path / "source")
    keys = [batch_key(f"/in/{name}.jsonl") for name in "abc"]
    view = DatasetStorage.reading(own + "/", {keys[0]: other, keys[1]: other, keys[2]: own})
    assert view._store_for(layout.batch_summary(keys[0])) is view._store_for(layout.batch_summary(keys[1]))
    assert view._store_for(layout.batch_summary(keys[0])).root == other
    assert view._store_for(layout.batch_summary(keys[2])) is view._own
