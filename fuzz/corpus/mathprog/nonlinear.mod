var x >= 0;
var y >= 0;
minimize z: x * y;
end;
