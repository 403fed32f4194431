# coordinator unit tests: modes and epochs with fake members and fake shards (threads), files.
foreach(_coord_unit coord_modes coord_files coord_epochs)
    spw_unit(${_coord_unit} sparrow_coordinator)
endforeach()
